import { register } from "node:module";
const hooks = `
const SHIM = "toolbus-node20:fs";
export async function resolve(specifier, context, next) {
  if ((specifier === "fs" || specifier === "node:fs") && context.parentURL !== SHIM) {
    return { url: SHIM, shortCircuit: true };
  }
  return next(specifier, context);
}
export async function load(url, context, next) {
  if (url === SHIM) {
    return {
      format: "module",
      shortCircuit: true,
      source: 'import fs from "node:fs"; export * from "node:fs"; export default fs;' +
        ' export const globSync = fs.globSync ?? (() => { throw new Error("fs.globSync needs Node 22"); });',
    };
  }
  return next(url, context);
}`;
register("data:text/javascript," + encodeURIComponent(hooks));

"""Room on the cluster for one more actor of a `RayBackend` (the executor's loop).

An actor holds what it was placed with (`num_cpus`, `num_gpus`, `resources`)
for as long as it lives, idle or not. So before a new actor starts, the
backend asks whether the cluster has room for it now (`ray.available_resources`,
less what its own actors still starting will take). If not:

1. the least recently used idle actor of *another* tool of the same backend
   is stopped, and its room goes to the new one (all of a backend's actors
   need the same);
2. failing that, a sync tool with actors of its own busy waits for one of
   them to be free (off the call's deadline), instead of asking for an actor
   that cannot be placed;
3. failing that, the actor is started anyway: the cluster may grow (an
   autoscaler), or others may free room, within `START_TIMEOUT`.

A backend whose actors need nothing explicit (Ray's defaults: no CPU held
while running) always has room, and asks Ray nothing.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import ray

if TYPE_CHECKING:
    from ._ray_pool import RayActor, ToolActors

__all__ = ["Room"]


class Room:
    """The placement of one backend's actors, and its tools' pools."""

    def __init__(self, placement: dict[str, Any]) -> None:
        needs: dict[str, float] = {}
        for key, name in (("num_cpus", "CPU"), ("num_gpus", "GPU")):
            if placement.get(key):
                needs[name] = float(placement[key])
        for key, value in (placement.get("resources") or {}).items():
            if value:
                needs[key] = float(value)
        self.needs = needs  # in Ray's names: CPU, GPU, custom
        self.pools: list[ToolActors] = []
        self.starting = 0  # actors started, not ready yet (their room is not taken yet)

    def free(self, pool: ToolActors) -> bool:
        """Whether one more actor of `pool` can be placed now, stopping an idle
        actor of another tool to make room if that is what it takes."""
        if not self.needs or self._fits():
            return True
        victim = self._least_recent(pool)
        if victim is None:
            return False
        owner, actor = victim
        try:
            owner.idle.remove(actor)
        except ValueError:
            return self.free(pool)  # taken meanwhile: look again
        owner.discard(actor)
        return True

    def _fits(self) -> bool:
        ask: Any = ray.available_resources  # untyped
        try:
            available: dict[str, float] = ask()
        except Exception:
            return True  # cannot tell: try
        return all(
            available.get(key, 0.0) - self.starting * need >= need
            for key, need in self.needs.items()
        )

    def _least_recent(self, pool: ToolActors) -> tuple[ToolActors, RayActor] | None:
        best: tuple[ToolActors, RayActor] | None = None
        oldest = time.monotonic() + 1
        for other in self.pools:
            if other is pool or other.closed:
                continue
            for actor in list(other.idle):
                if actor.idle_since < oldest:
                    best, oldest = (other, actor), actor.idle_since
        return best

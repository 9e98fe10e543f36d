"""Registries for the command-line tests (`toolbus tools list`, `toolbus call`)."""

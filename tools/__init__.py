"""Project tooling, not the runtime: the docs hook, the lock helper and the lab launcher."""

from .frontends.cli import entry

entry()

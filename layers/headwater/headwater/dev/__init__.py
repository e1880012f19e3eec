"""Local development: the embedded AWS emulator and the `make run` entry point."""

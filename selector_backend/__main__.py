from selector_backend.cli.main import entry_point

entry_point()

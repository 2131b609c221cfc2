"""One module per `relaxtui` sub-command: build the config from parsed args, run, render."""

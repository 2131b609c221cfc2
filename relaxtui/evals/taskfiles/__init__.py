"""Reading and scoring task files: the TOML reader, its data sources, prompt templates and answer readers."""

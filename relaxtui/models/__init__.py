"""Model presets, embedded-default assembly and the ggml_models/ store."""

"""llama.cpp engine: GGUF headers, the low-level model wrapper, chat templates and detokenisation."""

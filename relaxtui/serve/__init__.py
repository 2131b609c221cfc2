"""`relaxtui serve`: relaxed speculative decoding behind an OpenAI-compatible HTTP API.

- ``protocol``: request bodies in, checked values out (every error names its field);
- ``scheduler``: the model thread — requests become jobs of the batched loop (continuous batching, one job per
  choice, each with its own rule, knob, N, sampling and seed), events go back to their request;
- ``respond`` and ``render``: events to SSE chunks or one JSON response (stop strings, verdicts, logprobs,
  llama-server's ``timings``, relaxtui's statistics);
- ``scoring`` and ``score_reply``: prompt log-probs (``echo`` with ``logprobs``) computed on the model thread, and
  their response;
- ``metrics``: Prometheus text; ``app``: routes, auth, limits, one error shape; ``pair``: the models served.
"""

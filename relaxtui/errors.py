"""The one exception type that means "the user gave us something we cannot use".

The CLI turns it into one line on stderr and exit code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input: a missing file, a wrong option, incompatible models. The message is shown as is."""


class ContextFull(Exception):
    """A decode would overflow the context window; the loop stops and marks the output truncated."""

    def __init__(self, n_past: int, n_new: int, n_ctx: int) -> None:
        super().__init__(f"context full: {n_past} cached + {n_new} new > {n_ctx}")
        self.n_past, self.n_new, self.n_ctx = n_past, n_new, n_ctx


class NumericsError(RuntimeError):
    """A NaN or infinity reached an acceptance decision or a draw. Never treated as "accept": it is a bug in
    a rule (or a model that returned broken logits), reported with what was being computed."""

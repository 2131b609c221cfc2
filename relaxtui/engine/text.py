"""The model's own chat template (messages in, the prompt text out).

Why jinja2 over ``llama_chat_apply_template``: the C helper only knows a fixed list of templates and has no
way to pass ``enable_thinking``; the GGUF carries the real Jinja template, which we render in a sandbox.
"""

from __future__ import annotations

from collections.abc import Sequence

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from relaxtui.errors import UserError
from relaxtui.text import Message

# A plain ChatML fallback for models without a template (many base models).
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _raise(message: str) -> None:
    raise TemplateError(message)


class ChatTemplate:
    """Render a conversation with the model's template; thinking on/off where the template supports it."""

    def __init__(self, source: str | None, *, bos_token: str = "", eos_token: str = "") -> None:
        self.source = source or CHATML
        self.bos_token, self.eos_token = bos_token, eos_token
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        self._template = env.from_string(self.source)

    @property
    def supports_thinking(self) -> bool:
        """Templates that read ``enable_thinking`` (Qwen3 and alike) can switch the model's reasoning."""
        return "enable_thinking" in self.source

    def render(self, messages: Sequence[Message], *, thinking: bool | None = None,
               add_generation_prompt: bool = True) -> str:
        variables = {
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        if thinking is not None:
            variables["enable_thinking"] = thinking
        try:
            return self._template.render(**variables)
        except TemplateError as exc:
            raise UserError(f"the model's chat template failed: {exc}") from exc

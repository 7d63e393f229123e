"""A tiny chat tokenizer and causal LM built locally, for tests and benchmarks (no downloads).

The tokenizer is a byte-level BPE trained in a second with the ``tokenizers`` library, with
ChatML special tokens and a Qwen2.5-style Jinja chat template (tools in the system prompt,
``<tool_call>`` blocks, tool results as ``<tool_response>`` user turns). The model is a
randomly initialised two-layer Llama from ``transformers``. Both need the ``hf`` extra.

Example:
    >>> tokenizer = tiny_tokenizer()  # doctest: +SKIP
    >>> model = tiny_causal_lm(tokenizer)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

CHATML_TOOLS_TEMPLATE = (
    # Newlines that precede a "{%-" tag are emitted as {{ nl }}: "-" would strip literal ones.
    "{%- set nl = '\\n' %}"
    "{%- if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n<tools>\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools>\n"
    'Call a function with <tool_call>{"name": ..., "arguments": ...}</tool_call>.<|im_end|>{{ nl }}'
    "{%- elif messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>{{ nl }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>{{ nl }}"
    "{%- elif message.role == 'assistant' %}<|im_start|>assistant\n{{ message.content }}"
    "{%- for call in message.tool_calls or [] %}<tool_call>\n"
    '{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}\n'
    "</tool_call>{%- endfor %}<|im_end|>{{ nl }}"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>{{ nl }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CORPUS = [
    "What is the weather in Oslo, Paris, Rome or Lima today? It is sunny and warm.",
    "Call a function with the arguments below. The tool returned an answer.",
    '{"name": "get_weather", "arguments": {"city": "Oslo"}} {"text": "hello world"}',
    "system user assistant tool tools function name arguments description parameters type object",
    "The quick brown fox jumps over the lazy dog. 0123456789 + - * / = ( ) [ ] { } : , . ! ?",
]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MARKUP_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]


def tiny_tokenizer(vocab_size: int = 400) -> Any:
    """A ``PreTrainedTokenizerFast`` with ChatML special tokens and the tools chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )
    fast.add_tokens(MARKUP_TOKENS)  # plain (non-special) tokens: they survive skip_special_tokens
    fast.chat_template = CHATML_TOOLS_TEMPLATE
    return fast


def tiny_causal_lm(tokenizer: Any, seed: int = 0, layers: int = 2, hidden: int = 32) -> Any:
    """A randomly initialised Llama small enough to run generate on a CPU in milliseconds."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config).eval()

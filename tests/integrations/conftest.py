"""Fixtures for the scoring tests: a tokenizer trained here, in seconds, with a ChatML template."""

import pytest

CHATML = (
    "{% for m in messages %}"
    "<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] %}{{ m['content'] }}{% endif %}"
    "{% if m.get('tool_calls') %}{% for c in m['tool_calls'] %}"
    "<tool_call>{{ c['function'] | tojson }}</tool_call>"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CORPUS = [
    "A baker makes 24 muffins per tray and bakes 7 trays. The answer is 18.",
    "Call the tool run_command with the command ls, then read the output.",
    "def add_numbers(a, b): return a + b",
    "<tool_call> function name arguments path content </tool_call> user assistant system tool",
] * 50


@pytest.fixture(scope="session")
def chat_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE(unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    from tokenizers import decoders

    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        chat_template=CHATML,
    )

"""A Hugging Face `tokenizers.Tokenizer` and tokenizer_config.json from GGUF metadata.

`tokenizers` is imported inside the functions, so importing this module stays cheap
(the registry imports gguf_import, and with it this, while listing models).
"""

from typing import Any

from engine.errors import ModelError

# SentencePiece merges are found by splitting every piece at every position: quadratic in a
# piece's length. Real pieces are under ~50 characters; a longer one is a hostile file.
MAX_SPM_PIECE_CHARS = 256

_GPT2 = "gpt2"
_DIGITS = "digits"
_LLAMA3_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_TEKKEN_RE = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
    r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# llama.cpp's tokenizer.ggml.pre names → the HF pre-tokenizer they stand for.
_PRE_TOKENIZERS = {
    "default": _GPT2,
    "gpt2": _GPT2,
    "gpt-2": _GPT2,
    "olmo": _GPT2,
    "jais": _GPT2,
    "smollm": _DIGITS,
    "starcoder": _DIGITS,
    "refact": _DIGITS,
    "command-r": _DIGITS,
    "codeshell": _DIGITS,
    "exaone": _DIGITS,
    "minerva-7b": _DIGITS,
    "llama-bpe": _LLAMA3_RE,
    "llama3": _LLAMA3_RE,
    "smaug-bpe": _LLAMA3_RE,
    "tekken": _TEKKEN_RE,
}


def _pre_tokenizer(pre: str) -> Any:  # a tokenizers PreTokenizer
    from tokenizers import Regex, pre_tokenizers

    kind = _PRE_TOKENIZERS.get(pre or "default", _GPT2)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if kind == _GPT2:
        return byte_level
    if kind == _DIGITS:
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(kind), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ]
    )


def _list(meta: dict[str, Any], key: str, kinds: tuple[type, ...], length: int | None = None) -> list[Any] | None:
    """meta[key] as a list whose items are all of kinds (and of length items); ModelError if not."""
    value = meta.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, kinds) and not isinstance(v, bool) for v in value):
        raise ModelError(f"tokenizer metadata {key} is not a list of {kinds[0].__name__}")
    if length is not None and len(value) != length:
        raise ModelError(f"tokenizer metadata {key} has {len(value)} entries for {length} tokens")
    return value


def check_tokenizer_metadata(meta: dict[str, Any]) -> list[str]:
    """The token list, after checking every tokenizer array the build reads; ModelError if one is wrong."""
    tokens = _list(meta, "tokenizer.ggml.tokens", (str,))
    if not tokens:
        raise ModelError("tokenizer metadata has no tokenizer.ggml.tokens")
    _list(meta, "tokenizer.ggml.token_type", (int,), len(tokens))
    _list(meta, "tokenizer.ggml.scores", (float, int), len(tokens))
    _list(meta, "tokenizer.ggml.merges", (str,))
    if meta.get("tokenizer.ggml.model") == "llama":
        longest = max(range(len(tokens)), key=lambda i: len(tokens[i]))
        if len(tokens[longest]) > MAX_SPM_PIECE_CHARS:
            raise ModelError(
                f"tokenizer token {longest} is {len(tokens[longest])} characters long "
                f"(SentencePiece pieces are at most {MAX_SPM_PIECE_CHARS} here)"
            )
    return tokens


def _token_id(meta: dict[str, Any], kind: str, tokens: list[str]) -> "int | None":
    i = meta.get(f"tokenizer.ggml.{kind}_token_id")
    return i if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(tokens) else None


def build_tokenizer(meta: dict[str, Any]) -> Any:  # a tokenizers Tokenizer
    """A `tokenizers.Tokenizer` from GGUF tokenizer metadata; ModelError if the metadata is unusable."""
    from tokenizers import AddedToken, processors

    tokens = check_tokenizer_metadata(meta)
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    if meta.get("tokenizer.ggml.model") == "llama":
        tok = _sentencepiece_bpe(meta, tokens)
        special_types: tuple[int, ...] = (2, 3)  # unknown, control
    else:
        tok = _byte_level_bpe(meta, tokens)
        special_types = (3,)
    # 3 = control (special), 4 = user-defined (an added token that shows in text).
    tok.add_special_tokens(
        [AddedToken(tokens[i], special=True, normalized=False) for i, t in enumerate(types) if t in special_types]
    )
    tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i, t in enumerate(types) if t == 4])
    bos_id = _token_id(meta, "bos", tokens)
    add_bos = meta.get("tokenizer.ggml.add_bos_token", meta.get("tokenizer.ggml.model") == "llama")
    if add_bos and bos_id is not None:
        bos = tokens[bos_id]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
        )
    elif meta.get("tokenizer.ggml.model") != "llama":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def vocabulary(meta: dict[str, Any]) -> dict[str, int]:
    """token -> id as the imported tokenizer will have it (build_tokenizer's vocabulary)."""
    return _vocab(check_tokenizer_metadata(meta))


def _vocab(tokens: list[str]) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    return vocab


def _bpe(models: Any, **kwargs: Any) -> Any:  # tokenizers.models.BPE
    """tokenizers' BPE model; ModelError for merges the vocabulary does not hold."""
    try:
        return models.BPE(**kwargs)
    except Exception as e:
        if type(e) is not Exception:  # tokenizers reports bad data as a bare Exception; others are bugs
            raise
        raise ModelError(f"tokenizer metadata does not fit together ({e})") from e


def _byte_level_bpe(meta: dict[str, Any], tokens: list[str]) -> Any:
    from tokenizers import Tokenizer, decoders, models

    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
    if any(len(m) != 2 for m in merges):
        raise ModelError("tokenizer metadata tokenizer.ggml.merges has an entry without a space")
    tok = Tokenizer(_bpe(models, vocab=_vocab(tokens), merges=merges, fuse_unk=False))
    tok.pre_tokenizer = _pre_tokenizer(meta.get("tokenizer.ggml.pre", "default"))
    tok.decoder = decoders.ByteLevel()
    return tok


def _sentencepiece_bpe(meta: dict[str, Any], tokens: list[str]) -> Any:
    """SentencePiece BPE as transformers' LlamaConverter builds it (legacy: a space after specials),
    or without the leading space as its GemmaConverter does."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    vocab = _vocab(tokens)
    scores = meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
    merges = _merges_from_scores(tokens, scores, vocab)
    unk_id = meta.get("tokenizer.ggml.unknown_token_id", 0)
    unk = tokens[unk_id] if isinstance(unk_id, int) and 0 <= unk_id < len(tokens) else None
    tok = Tokenizer(_bpe(models, vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True, byte_fallback=True))
    steps: list[Any] = [normalizers.Replace(" ", "\u2581")]
    # Llama 2's pieces start words with the space marker, so text gets one in front (and the
    # decoder takes it off again); Gemma's (add_space_prefix false) do not.
    space_prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    if space_prefix:
        steps.insert(0, normalizers.Prepend("\u2581"))
    tok.normalizer = normalizers.Sequence(steps)
    decode = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    tok.decoder = decoders.Sequence(decode + [decoders.Strip(" ", 1, 0)] if space_prefix else decode)
    return tok


def _merges_from_scores(tokens: list[str], scores: list[float], vocab: dict[str, int]) -> list[tuple[str, str]]:
    """BPE merges implied by a SentencePiece vocabulary: every split of a piece into two
    pieces, ordered by the merged piece's score (transformers' SentencePieceExtractor)."""
    merges: list[tuple[float, int, tuple[str, str]]] = []
    for piece_id, piece in enumerate(tokens):
        local = [(piece[:i], piece[i:]) for i in range(1, len(piece)) if piece[:i] in vocab and piece[i:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend((scores[piece_id], piece_id, m) for m in local)
    merges.sort(key=lambda m: (-m[0], m[1]))
    return [m for _, _, m in merges]


def build_tokenizer_config(meta: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    tokens = check_tokenizer_metadata(meta)

    def token(kind: str) -> str | None:
        i = _token_id(meta, kind, tokens)
        return None if i is None else tokens[i]

    eot = token("eot")
    result = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token("bos"),
        # The chat turn ends with EOT when a GGUF has one (Llama 3's <|eot_id|>).
        "eos_token": eot or token("eos"),
        "pad_token": token("padding") or token("eos"),
        "unk_token": token("unknown"),
        "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", meta.get("tokenizer.ggml.model") == "llama")),
        "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token", False)),
        "model_max_length": config["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
    }
    template = meta.get("tokenizer.chat_template")
    if isinstance(template, str) and template:
        result["chat_template"] = template
    return result

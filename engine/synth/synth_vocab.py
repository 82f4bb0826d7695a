"""The small SentencePiece-style vocabulary of shardscope's synthetic models.

llama.cpp's "llama" tokenizer (SPM) needs: the control tokens, 256 byte tokens
``<0x00>``..``<0xFF>`` (byte fallback, so any text tokenizes), and normal pieces with
scores. It starts from single characters and repeatedly merges the adjacent pair with
the best score whose concatenation is a piece; so every piece here is reachable by
such merges (each word comes with all its prefixes), and anything else falls back to
characters or bytes. Detokenizing gives the text back exactly (spaces are "▁").

The vocabulary is defined here, not copied from a real model, and kept under 1000
tokens so ``token_embd`` and ``output`` stay a few MB: the size of a synthetic model
sits in its layers.
"""

from __future__ import annotations

from dataclasses import dataclass

# gguf.TokenType values, repeated here so this module imports nothing heavy.
NORMAL = 1
UNKNOWN = 2
CONTROL = 3
BYTE = 6

SPACE = "\u2581"  # "▁", SentencePiece's visible space

UNK_ID = 0
BOS_ID = 1
EOS_ID = 2

# Common English words (most frequent first); each becomes "▁word" plus its prefixes.
_WORDS = """
the of and to in is was for that on with as by at from it his an be are this which
or had he not but have were first one their its new after who they also has two her
been other time when there all during into school may years more most only over city
some world would where later up such used many can state about national out known
university united then made these while under between well part history states back
through american both being because high three people year new first before long than
what each like how print press book books began work word read write page ink paper
type metal letter letters machine model memory weight weights layer layers stream disk
speed token tokens text small large data file files load time run test shard order
century europe german printing invention begins gutenberg
""".split()

# Pieces that continue a word (no leading "▁"); also added with their prefixes.
_SUFFIXES = """
s es ed ing er ers ly tion tions al ment ness ity ive ous able ful less est ic
""".split()

_MAX_VOCAB = 1000


@dataclass(frozen=True)
class SynthVocab:
    tokens: tuple[str, ...]
    scores: tuple[float, ...]
    token_types: tuple[int, ...]
    unk_id: int = UNK_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)


def build_vocab() -> SynthVocab:
    """The vocabulary, identical on every call (it is part of the file format)."""
    tokens: list[str] = ["<unk>", "<s>", "</s>"]
    types: list[int] = [UNKNOWN, CONTROL, CONTROL]
    scores: list[float] = [0.0, 0.0, 0.0]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(BYTE)
        scores.append(0.0)

    pieces: list[str] = []
    seen: set[str] = set()

    def add(piece: str) -> None:
        if piece not in seen:
            seen.add(piece)
            pieces.append(piece)

    for word in _WORDS:
        spaced = SPACE + word
        for end in range(2, len(spaced) + 1):
            add(spaced[:end])
    for suffix in _SUFFIXES:
        for end in range(2, len(suffix) + 1):
            add(suffix[:end])
    # Single characters: the seeds of every merge. Printable ASCII minus space.
    add(SPACE)
    for code in range(33, 127):
        add(chr(code))

    # Earlier = "more frequent" = higher score, as in a trained SentencePiece model.
    for rank, piece in enumerate(pieces):
        tokens.append(piece)
        types.append(NORMAL)
        scores.append(-float(rank))

    if len(tokens) > _MAX_VOCAB:  # a guard for whoever edits the word lists
        raise AssertionError(f"synthetic vocabulary has {len(tokens)} tokens, limit {_MAX_VOCAB}")
    return SynthVocab(tuple(tokens), tuple(scores), tuple(types))

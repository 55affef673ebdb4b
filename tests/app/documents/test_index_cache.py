"""The big documents' indexes are built once and kept in a bounded cache: the least recently used go."""

from app.documents.index_cache import IndexCache

TEXT = "The calculator adds numbers. " * 20


def test_a_document_is_indexed_once():
    cache = IndexCache()
    first = cache.get("a" * 64, "notes.txt", TEXT)
    assert cache.get("a" * 64, "notes.txt", TEXT) is first and len(cache) == 1


def test_past_the_limit_the_least_recently_used_goes():
    cache = IndexCache(max_indexes=2)
    a, b = cache.get("a", "a.txt", TEXT), cache.get("b", "b.txt", TEXT)
    assert cache.get("a", "a.txt", TEXT) is a  # used again: b is now the oldest
    cache.get("c", "c.txt", TEXT)
    assert len(cache) == 2 and cache.get("a", "a.txt", TEXT) is a
    assert cache.get("b", "b.txt", TEXT) is not b  # it went: built again


def test_past_the_characters_the_oldest_go_but_the_newest_stays():
    cache = IndexCache(max_chars=len(TEXT) + 1)
    cache.get("a", "a.txt", TEXT)
    big = cache.get("b", "b.txt", TEXT * 3)  # alone over the limit: it stays, the older one goes
    assert len(cache) == 1 and cache.get("b", "b.txt", TEXT * 3) is big

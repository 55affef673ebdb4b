"""engine/context/memory.py: a draft model's caches count against the memory budget and in MemoryReport."""

from engine.context.conversation import ConversationCache
from engine.context.memory import ConversationCaches
from engine.local.generation import prefill


def filled(model, tokens: int) -> ConversationCache:
    conv = ConversationCache.create(model, 16)
    prefill(model, conv, list(range(1, tokens + 1)))
    return conv


def test_draft_caches_are_reported_and_evicted_with_their_conversation(tiny_model, tmp_path):
    model, _ = tiny_model
    caches = ConversationCaches(budget_bytes=1 << 40, save_dir=tmp_path)
    for conv_id in ("old", "new"):
        caches.put(conv_id, filled(model, 20))
        caches.put_draft(conv_id, filled(model, 20))
    main_bytes, draft_bytes = caches.total_bytes, caches.draft_bytes
    report = caches.report()
    assert draft_bytes > 0 and report.draft_bytes == draft_bytes and report.draft_caches == 2
    assert report.kv_bytes == main_bytes  # the main model's caches, as before

    # The main caches alone fit; with the drafts they do not: the least recent chat goes, with its draft.
    caches.budget_bytes = main_bytes + draft_bytes - 1
    assert caches.enforce(keep="new") == ["old"]
    assert caches.draft("old") is None and caches.draft("new") is not None
    assert caches.report().draft_caches == 1

    caches.forget("new")
    assert caches.draft("new") is None and caches.report().draft_bytes == 0

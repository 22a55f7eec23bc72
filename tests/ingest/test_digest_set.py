"""The duplicate table ingest keeps (compact digests, so memory stays flat) behaves as a set."""
import hashlib
import random

from stateset_agents.pipeline.ingest import DigestSet


def test_digest_set_agrees_with_a_python_set():
    rng = random.Random(0)
    table, reference = DigestSet(buckets=4), set()
    for _ in range(20_000):
        digest = hashlib.blake2b(str(rng.randrange(8_000)).encode(), digest_size=16).digest()
        assert (digest in table) == (digest in reference)
        assert table.add(digest) == (digest not in reference)
        reference.add(digest)
    assert len(table) == len(reference)

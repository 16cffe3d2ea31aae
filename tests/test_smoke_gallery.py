import numpy as np


def test_caption_search_finds_penguin(stamps_gallery, minilm):
    q = minilm.encode_texts(["a penguin"])[0]
    r = stamps_gallery.search(q, "caption_text", 5)
    assert "penguin" in stamps_gallery.record(r.ids[0]).caption.lower()
    assert len(stamps_gallery) == 627
    assert np.allclose(np.linalg.norm(stamps_gallery.vectors("image")[:3], axis=1), 1, atol=1e-4)

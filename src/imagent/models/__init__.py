"""Model backends behind three protocols (:mod:`~imagent.models.base`): ``DualEncoder`` (text and images in one
space), ``TextEmbedder`` and ``ChatModel`` (text + images, JSON schemas, yes/no, tool calls).

:mod:`~imagent.models.registry` builds a backend from a config entry (``build_chat_model``,
``build_dual_encoder``, ``build_text_embedder``; third-party backends ``register``); :mod:`~imagent.models.roles`
gives methods named roles (``reasoner``, ``verifier``...) over them, with caption mode, the call cache, JSON
output and call caps; :mod:`~imagent.models.presets` holds ready setups. Import the module you need.
"""

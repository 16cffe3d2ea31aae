"""Bulk verification: a method fans calls out to as many threads as the role's backend takes at once."""

from __future__ import annotations

from imagent.core.config import ChatModelConfig
from imagent.methods.base import get_method
from imagent.models.chat_openai import OpenAIChatModel
from imagent.models.roles import Roles


class Served:
    backend, model_id, sees_images, concurrency = "scripted", "served", False, 8


class InProcess:
    backend, model_id, sees_images = "scripted", "in-process", False


def test_fanout_follows_the_backend_unless_configured(make_context):
    cls = get_method("imagescope")
    ctx = make_context(Served())
    assert cls(ctx).fanout("verifier") == 8
    assert cls(ctx, {"concurrency": 2}).fanout("verifier") == 2
    assert cls(make_context(InProcess())).fanout("verifier") == 1


def test_served_backend_reports_its_concurrency():
    model = OpenAIChatModel.from_config(ChatModelConfig(backend="openai", model="m", base_url="http://127.0.0.1:9/v1",
                                                        concurrency=6))
    assert Roles.from_models({"default": model})["verifier"].concurrency == 6

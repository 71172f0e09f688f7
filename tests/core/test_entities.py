"""Entity display: the one text form the CLI, the console and the demo show."""

from __future__ import annotations

from quotaflow.core.entities import entity_text


def test_entity_text_orders_parts_and_names_the_default() -> None:
    assert entity_text({"client-id": None, "user": "alice"}) == "user=alice, client-id=<default>"
    assert entity_text({"ip": "10.0.0.1"}) == "ip=10.0.0.1"
    assert entity_text({}) == ""

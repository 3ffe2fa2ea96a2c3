"""The Grafana dashboards in dashboards/ are what generate.py makes, and each has the variables it promises."""

from __future__ import annotations

from dashboard_support import committed, generator


def test_committed_dashboards_are_generated(capsys):
    assert generator().main(["--check"]) == 0, capsys.readouterr().err
    assert sorted(committed()) == sorted(generator().DASHBOARDS)


def _variables(model) -> dict[str, dict]:
    return {v["name"]: v for v in model["templating"]["list"]}


def test_each_dashboard_has_a_datasource_variable_that_every_panel_uses():
    for name, model in committed().items():
        variables = _variables(model)
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        for item in model["panels"]:
            assert item["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (name, item["title"])
            assert item["targets"] and all(t["datasource"]["uid"] == "${datasource}" for t in item["targets"])
        ids = [item["id"] for item in model["panels"]]
        assert ids == list(range(1, len(ids) + 1)) and len({model["uid"] for model in committed().values()}) == 4


def test_token_and_fragmentation_dashboards_filter_by_host_gpu_and_endpoint():
    models = committed()
    tokens, memory = models["gpuslo-token-latency.json"], models["gpuslo-fragmentation.json"]
    assert {"host", "gpu", "endpoint", "model"} <= set(_variables(tokens))
    assert {"host", "gpu"} <= set(_variables(memory))
    for model, labels in ((tokens, ("host", "gpu", "endpoint", "model")), (memory, ("host", "gpu"))):
        for title, expr in generator().panel_queries(model):
            if "gpuslo_token" in expr or "gpuslo_fragmentation" in expr or "gpuslo_memory" in expr:
                assert all(f'{label}=~"${label}"' in expr for label in labels), (title, expr)
    heatmap = tokens["panels"][0]
    assert heatmap["type"] == "heatmap" and heatmap["targets"][0]["format"] == "heatmap"
    assert "gpuslo_token_latency_seconds_bucket" in heatmap["targets"][0]["expr"]

"""The CLI contract: `check` exit codes and output, `explain`, `bootstrap`."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
import yaml

from turnout.app import build_controller, default_sources
from turnout.cli import build_parser, main, serve_config
from turnout.config import ServeConfig
from turnout.sources.base import StoreSink
from turnout.store import Store

REPO = Path(__file__).resolve().parents[2]

VALID = """\
apiVersion: v1
kind: Service
metadata: {name: app}
spec:
  ports: [{name: http, port: 80}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: root}
spec:
  virtualhost: {fqdn: cli.example.com}
  routes:
    - conditions: [{prefix: /}]
      services: [{name: app, port: 80}]
    - conditions: [{prefix: /api}, {header: {name: x-v, exact: "2"}}]
      services: [{name: app, port: 80}]
"""

ORPHAN = """\
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: lonely, namespace: team}
spec:
  routes:
    - services: [{name: app, port: 80}]
"""


def test_check_valid_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.yaml").write_text(VALID)
    assert main(["check", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "HTTPProxy default/root: valid: Valid HTTPProxy" in out


def test_check_orphan_exits_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.yaml").write_text(VALID)
    (tmp_path / "b.yaml").write_text(ORPHAN)
    assert main(["check", str(tmp_path), "-o", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    states = {o["metadata"]["name"]: o["status"]["currentStatus"] for o in doc["objects"]}
    assert states == {"root": "valid", "lonely": "orphaned"}


def test_check_unparseable_exits_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.yaml").write_text(VALID)
    (tmp_path / "broken.yaml").write_text("kind: [\n")
    assert main(["check", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "broken.yaml:2: error: cannot parse YAML" in err


def test_check_missing_path_exits_two(tmp_path: Path) -> None:
    assert main(["check", str(tmp_path / "nope.yaml")]) == 2


def test_check_object_without_name_is_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: Service\nmetadata: {}\n")
    assert main(["check", str(tmp_path), "-o", "yaml"]) == 1
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["problems"][0]["reason"] == "Service: metadata.name is missing"
    assert doc["problems"][0]["line"] == 1


def test_check_quickstart_is_valid() -> None:
    assert main(["check", str(REPO / "examples" / "quickstart")]) == 0


def test_check_text_shows_a_gatewayclass_without_a_namespace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check", str(REPO / "examples" / "gateway-api")]) == 0
    lines = capsys.readouterr().out.splitlines()
    # Each line starts with where the object was written: `path:line: `.
    assert any(re.match(r"\S+:\d+: GatewayClass turnout: valid", line) for line in lines), lines
    assert any(re.match(r"\S+:\d+: Gateway infra/demo: valid", line) for line in lines), lines


def test_explain_names_the_route_and_what_was_passed_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text(VALID)
    code = main(
        ["explain", str(tmp_path), "--host", "cli.example.com", "--path", "/api/x", "-H", "x-v: 3"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "header 'x-v' is not exact '2'" in out
    assert "route: HTTPProxy default/root spec.routes[0]" in out
    assert "forward to default/app/80/" in out


def test_explain_json_and_no_match(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.yaml").write_text(VALID)
    assert (
        main(
            [
                "explain",
                str(tmp_path),
                "--host",
                "cli.example.com",
                "--path",
                "/api",
                "-H",
                "X-V: 2",
                "-o",
                "json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["route"] == "HTTPProxy default/root spec.routes[1]"
    assert doc["clusters"][0]["name"].startswith("default/app/80/")
    assert main(["explain", str(tmp_path), "--host", "nobody.example.com"]) == 1


def test_bootstrap_writes_ads_config(tmp_path: Path) -> None:
    out = tmp_path / "bootstrap.yaml"
    assert main(["bootstrap", str(out), "--xds-port", "18123", "--node-id", "edge-1"]) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["node"]["id"] == "edge-1"
    # Delta xDS by default; --xds-api sotw keeps the State of the World.
    assert doc["dynamic_resources"]["ads_config"]["api_type"] == "DELTA_GRPC"
    assert doc["dynamic_resources"]["ads_config"]["set_node_on_first_message_only"] is True
    assert "18123" in json.dumps(doc)
    assert main(["bootstrap", str(out), "--xds-api", "sotw"]) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["dynamic_resources"]["ads_config"]["api_type"] == "GRPC"


def test_check_reports_unknown_kinds_and_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text(VALID)
    (tmp_path / "b.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n"
    )
    # A Deployment is not ours to read: a warning, and check still passes.
    assert main(["check", str(tmp_path)]) == 0
    assert (
        "warning: Deployment default/web: kind Deployment of apiVersion 'apps/v1' is not "
        "read by turnout; ignored" in capsys.readouterr().err
    )
    (tmp_path / "c.yaml").write_text(
        "apiVersion: projectcontour.io/v1alpha9\nkind: HTTPProxy\nmetadata: {name: future}\n"
        "spec: {virtualhost: {fqdn: cli.example.com}}\n"
    )
    # An HTTPProxy at a version turnout does not read is an error, and is not compiled.
    assert main(["check", str(tmp_path), "-o", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    names = {o["metadata"]["name"] for o in doc["objects"]}
    assert names == {"root"}
    problem = next(p for p in doc["problems"] if p["object"] == "HTTPProxy default/future")
    assert problem["severity"] == "error"
    assert "turnout reads projectcontour.io/v1" in problem["reason"]


def test_serve_with_a_taken_port_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    (tmp_path / "a.yaml").write_text(VALID)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(
            ["serve", str(tmp_path), "--admin-port", str(port), "--no-envoy", "--xds-port", "0"]
        )
    assert code == 2
    assert f"cannot listen on 127.0.0.1:{port} (--admin-port)" in capsys.readouterr().err


def test_serve_refuses_a_state_dir_open_to_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text(VALID)
    shared = tmp_path / "state"
    shared.mkdir()
    shared.chmod(0o777)
    code = main(["serve", str(tmp_path / "a.yaml"), "--state-dir", str(shared)])
    assert code == 2
    assert f"state directory {shared} is open to other users" in capsys.readouterr().err


def test_check_prints_each_problem_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "broken.yaml").write_text("kind: [\n")
    main(["check", str(tmp_path)])
    err = capsys.readouterr().err
    assert err.count("cannot parse YAML") == 1, err


def test_explain_https_listener(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.yaml").write_text(VALID)
    # A plain host has no HTTPS virtual host: asking the HTTPS listener finds nothing.
    assert main(["explain", str(tmp_path), "--host", "cli.example.com", "--https"]) == 1
    assert "request: GET https://cli.example.com/" in capsys.readouterr().out


def test_explain_reports_requests_envoy_rejects_before_routing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text(VALID)
    main(["explain", str(tmp_path), "--host", "cli.example.com", "--path", "/a#frag"])
    assert "action: 400 before routing" in capsys.readouterr().out


def _regex_proxy(regex: str) -> str:
    return f"""\
apiVersion: v1
kind: Service
metadata: {{name: app}}
spec:
  ports: [{{name: http, port: 80}}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: re}}
spec:
  virtualhost: {{fqdn: re.example.com}}
  routes:
    - conditions: [{{regex: "{regex}"}}]
      services: [{{name: app, port: 80}}]
"""


def test_check_accepts_a_regex_within_envoys_program_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Envoy counts `/x.{20}` as 46 (one byte per `.`); RE2's default UTF-8 count would be 166.
    (tmp_path / "a.yaml").write_text(_regex_proxy("/x.{20}"))
    assert main(["check", str(tmp_path)]) == 0
    assert "HTTPProxy default/re: valid" in capsys.readouterr().out


def test_check_refuses_a_regex_over_envoys_program_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text(_regex_proxy("/x.{48}"))
    assert main(["check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "HTTPProxy default/re: invalid" in out
    assert (
        "spec.routes[0].conditions[0].regex: RE2 program size 102 exceeds Envoy's limit of 100"
        in out
    )


async def _emptied_keeps_objects(path: Path, *flags: str) -> bool:
    """Whether `serve`'s files source, with `flags`, still has a file's objects just after the
    file was emptied."""
    (path / "a.yaml").write_text(VALID)
    config = serve_config(build_parser().parse_args(["serve", str(path), *flags]))
    [source] = default_sources(config)
    store = Store()
    synced = asyncio.Event()
    task = asyncio.create_task(source.run(StoreSink(store, lambda: None, synced.set)))
    try:
        await asyncio.wait_for(synced.wait(), 5)
        assert store.snapshot().objects
        (path / "a.yaml").write_text("")
        await source.reload()
        return bool(store.snapshot().objects)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_serve_empty_file_grace_flag_reaches_the_files_source(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve", str(tmp_path)])
    assert serve_config(args).empty_file_grace_s == ServeConfig(paths=()).empty_file_grace_s == 5
    assert await _emptied_keeps_objects(tmp_path)
    assert await _emptied_keeps_objects(tmp_path, "--empty-file-grace", "60")
    assert not await _emptied_keeps_objects(tmp_path, "--empty-file-grace", "0")
    assert not await _emptied_keeps_objects(tmp_path, "--no-watch")
    for bad in ("-1", "nan", "x", "3601"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", str(tmp_path), "--empty-file-grace", bad])


def test_xds_inline_scopes_reaches_the_xds_server(tmp_path: Path) -> None:
    """`--xds-inline-scopes` makes the controller's xDS server send Delta Envoys inline scopes;
    without it they name their route configurations."""
    for flags, inline in (([], False), (["--xds-inline-scopes"], True)):
        args = build_parser().parse_args(["serve", str(tmp_path), "--no-envoy", *flags])
        config = serve_config(args)
        assert config.xds_inline_scopes is inline
        assert build_controller(config).xds.inline_scopes is inline

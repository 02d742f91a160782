"""signalctl/kubeconfigs.py: ``$KUBECONFIG`` merged exactly as kubectl merges it, as a table of
cases (files in precedence order -> merged clusters, contexts, users, current-context), then
the file choice and --context."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from signalctl import kubeconfigs
from signalctl.kubectx import CommandError

Doc = dict[str, Any]


def config(
    *,
    current: str | None = None,
    clusters: dict[str, str] | None = None,
    users: dict[str, str] | None = None,
    contexts: dict[str, tuple[str, str]] | None = None,
) -> Doc:
    doc: Doc = {"apiVersion": "v1", "kind": "Config"}
    if current is not None:
        doc["current-context"] = current
    doc["clusters"] = [{"name": n, "cluster": {"server": s}} for n, s in (clusters or {}).items()]
    doc["users"] = [{"name": n, "user": {"token": t}} for n, t in (users or {}).items()]
    doc["contexts"] = [{"name": n, "context": {"cluster": c, "user": u}} for n, (c, u) in (contexts or {}).items()]
    return doc


def summary(doc: Doc) -> tuple[str | None, Doc, Doc, Doc]:
    return (
        doc.get("current-context"),
        {c["name"]: c["cluster"]["server"] for c in doc["clusters"]},
        {u["name"]: u["user"]["token"] for u in doc["users"]},
        {c["name"]: (c["context"]["cluster"], c["context"]["user"]) for c in doc["contexts"]},
    )


CASES = [
    pytest.param(
        [config(current="a", clusters={"c": "https://one"}), config(current="b", clusters={"c": "https://two"})],
        ("a", {"c": "https://one"}, {}, {}),
        id="first file to set a cluster name wins; current-context from the first that sets it",
    ),
    pytest.param(
        [config(clusters={"c": "https://one"}), config(current="b", clusters={"d": "https://two"})],
        ("b", {"c": "https://one", "d": "https://two"}, {}, {}),
        id="current-context from a later file when the first sets none; disjoint names all kept",
    ),
    pytest.param(
        [config(current="", users={"u": "t1"}), config(current="x", users={"u": "t2", "v": "t3"})],
        ("x", {}, {"u": "t1", "v": "t3"}, {}),
        id="an empty current-context counts as unset; users merge by name, first wins",
    ),
    pytest.param(
        [
            config(contexts={"k": ("c1", "u1")}),
            config(current="k", contexts={"k": ("c2", "u2"), "m": ("c3", "u3")}),
        ],
        ("k", {}, {}, {"k": ("c1", "u1"), "m": ("c3", "u3")}),
        id="a context of the same name in a later file is ignored whole",
    ),
    pytest.param([], (None, {}, {}, {}), id="nothing to merge"),
]


@pytest.mark.parametrize(("documents", "expected"), CASES)
def test_merge_is_kubectls(documents: list[Doc], expected: tuple[Any, ...]) -> None:
    assert summary(kubeconfigs.merge(documents)) == expected


def test_an_entry_is_taken_whole_not_field_by_field() -> None:
    first = {"clusters": [{"name": "c", "cluster": {"server": "https://one"}}]}
    second = {"clusters": [{"name": "c", "cluster": {"server": "https://two", "insecure-skip-tls-verify": True}}]}
    assert kubeconfigs.merge([first, second])["clusters"] == first["clusters"]


def test_relative_paths_are_relative_to_the_file_that_defined_them() -> None:
    doc = {
        "clusters": [{"name": "c", "cluster": {"server": "https://x", "certificate-authority": "ca.crt"}}],
        "users": [
            {"name": "u", "user": {"client-certificate": "u.crt", "client-key": "/abs/u.key", "tokenFile": "t"}},
            {"name": "e", "user": {"exec": {"command": "bin/plugin"}}},
            {"name": "p", "user": {"exec": {"command": "plugin-on-path"}}},
        ],
    }
    resolved = kubeconfigs.resolve_paths(doc, Path("/conf/dir"))
    assert resolved["clusters"][0]["cluster"]["certificate-authority"] == "/conf/dir/ca.crt"
    user = resolved["users"][0]["user"]
    assert (user["client-certificate"], user["client-key"], user["tokenFile"]) == (
        "/conf/dir/u.crt",
        "/abs/u.key",
        "/conf/dir/t",
    )
    assert resolved["users"][1]["user"]["exec"]["command"] == "/conf/dir/bin/plugin"
    assert resolved["users"][2]["user"]["exec"]["command"] == "plugin-on-path"
    assert doc["clusters"][0]["cluster"]["certificate-authority"] == "ca.crt"  # the input is not changed


@pytest.mark.parametrize(
    ("flag", "kubeconfig_env", "expected", "explicit"),
    [
        ("f", None, ["f"], True),
        ("f", "a:b", ["f"], True),
        (None, "a:b:a::c", ["a", "b", "c"], False),
        (None, "", ["HOME/.kube/config"], False),
        (None, None, ["HOME/.kube/config"], False),
    ],
)
def test_which_files(flag: str | None, kubeconfig_env: str | None, expected: list[str], explicit: bool) -> None:
    environ = {} if kubeconfig_env is None else {"KUBECONFIG": kubeconfig_env}
    files, named = kubeconfigs.candidates(flag, environ, Path("HOME"))
    assert [str(f) for f in files] == expected
    assert named is explicit


def test_load_merges_existing_files_and_skips_missing_ones(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    a, b = tmp_path / "one" / "a", tmp_path / "b"
    doc_a = config(clusters={"c": "https://one"})
    doc_a["clusters"][0]["cluster"]["certificate-authority"] = "ca.crt"
    a.write_text(yaml.safe_dump(doc_a))
    b.write_text(yaml.safe_dump(config(current="k", contexts={"k": ("c", "u")}, users={"u": "t"})))
    environ = {"KUBECONFIG": f"{tmp_path / 'absent'}:{a}:{b}"}
    loaded = kubeconfigs.load(None, environ, tmp_path / "home")
    assert loaded is not None
    assert loaded.files == (a, b)
    assert loaded.origin == f"$KUBECONFIG ({a}:{b})"
    assert summary(loaded.document) == ("k", {"c": "https://one"}, {"u": "t"}, {"k": ("c", "u")})
    assert loaded.document["clusters"][0]["cluster"]["certificate-authority"] == str(tmp_path / "one" / "ca.crt")


def test_load_refuses_what_kubectl_refuses(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with pytest.raises(CommandError, match="does not exist; pass an existing file with --kubeconfig"):
        kubeconfigs.load(str(tmp_path / "nope"), {}, home)
    with pytest.raises(CommandError, match="no kubeconfig found"):
        kubeconfigs.load(None, {"KUBECONFIG": str(tmp_path / "nope")}, home)
    with pytest.raises(CommandError, match="no kubeconfig found"):
        kubeconfigs.load(None, {}, home)
    assert kubeconfigs.load(None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, home) is None
    bad = tmp_path / "bad"
    bad.write_text("- a list\n")
    with pytest.raises(CommandError, match="is not a mapping"):
        kubeconfigs.load(None, {"KUBECONFIG": str(bad)}, home)
    # KUBECONFIG set: ~/.kube/config is not looked at, as with kubectl.
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("{}")
    with pytest.raises(CommandError, match="no kubeconfig found"):
        kubeconfigs.load(None, {"KUBECONFIG": str(tmp_path / "nope")}, home)
    loaded = kubeconfigs.load(None, {}, home)
    assert loaded is not None
    assert loaded.files == (home / ".kube" / "config",)


def test_context_flag_replaces_current_context_and_an_unknown_one_is_refused() -> None:
    doc = config(current="a", contexts={"a": ("c", "u"), "b": ("c", "u")})
    assert kubeconfigs.with_context(doc, "b", "f")["current-context"] == "b"
    assert kubeconfigs.with_context(doc, None, "f")["current-context"] == "a"
    with pytest.raises(CommandError, match=r"context 'z' does not exist in f \(contexts: a, b\)"):
        kubeconfigs.with_context(doc, "z", "f")

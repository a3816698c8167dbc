#!/usr/bin/env python3
"""Checks the Kubernetes example (deploy/kubernetes/); exits 1 naming what is wrong.

(a) It renders: `kustomize build` (the KUSTOMIZE variable, else target/tools/kustomize as
    scripts/setup.sh installs it, else PATH); without kustomize the files that
    kustomization.yaml lists are read as they are, said loudly (under CI=true: a failure).
(b) Every document parses and validates against Kubernetes' OpenAPI schemas, strictly
    (unknown fields too), with kubernetes-validate; Multus NetworkAttachmentDefinitions,
    which have no bundled schema, must hold CNI JSON with a type.
(c) What the schemas cannot see: selectors match their pods' labels, a StatefulSet's
    serviceName is a headless Service, volume mounts, ConfigMap keys and $(VARS) exist,
    probes name ports of their container, etcd's --initial-cluster names its own pods.
(d) The upf: the ConfigMap's upf.toml passes `upf run --check --instance POD` for every pod
    of the StatefulSet, reaches etcd's pods, and agrees with the shards' `addresses`, the
    pods' interfaces, the probes and the sidecar; the sidecar's script passes `sh -n`.

    scripts/check-k8s.py --upf target/debug/upf [--k8s-version 1.30] [DIR]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parent.parent
NETWORKS = "k8s.v1.cni.cncf.io/networks"
problems = []


def fail(what):
    problems.append(what)


def render(d):
    """The documents of the example, rendered by kustomize when there is one."""
    # Every file parses on its own, whatever kustomize makes of it.
    for f in sorted(d.glob("*.yaml")):
        try:
            list(yaml.safe_load_all(f.read_text()))
        except yaml.YAMLError as e:
            fail(f"{f.name}: does not parse: {e}")
    if problems:
        return []
    k = os.environ.get("KUSTOMIZE") or str(ROOT / "target/tools/kustomize")
    k = k if os.access(k, os.X_OK) else shutil.which("kustomize")
    if k:
        r = subprocess.run([k, "build", str(d)], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"kustomize build {d}: {r.stderr.strip()}")
            return []
        print(f"check-k8s: rendered by {k}")
        return [x for x in yaml.safe_load_all(r.stdout) if x]
    if os.environ.get("CI") == "true":
        fail("kustomize: not found (scripts/setup.sh installs it in target/tools)")
    print("check-k8s: WARNING: no kustomize: the files are checked as listed, unrendered")
    kz = yaml.safe_load((d / "kustomization.yaml").read_text())
    return [x for f in kz["resources"] for x in yaml.safe_load_all((d / f).read_text()) if x]


def name(o):
    return f"{o.get('kind')}/{o.get('metadata', {}).get('name')}"


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def validate(docs, version):
    for o in docs:
        if o.get("kind") == "NetworkAttachmentDefinition":
            try:
                cni = json.loads(o["spec"]["config"])
                if not cni.get("type") or not cni.get("cniVersion"):
                    fail(f"{name(o)}: spec.config needs cniVersion and type")
            except (KeyError, TypeError, ValueError) as e:
                fail(f"{name(o)}: spec.config is not CNI JSON: {e}")
            continue
        try:
            kubernetes_validate.validate(o, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            where = ".".join(str(p) for p in e.path)
            fail(f"{name(o)}: {where}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError:
            fail(f"{name(o)}: no Kubernetes {version} schema for {o.get('apiVersion')}")


def cross_check(docs):
    """References between objects, and inside a pod."""
    by = {(o.get("kind"), o["metadata"]["name"]): o for o in docs}
    workloads = [o for o in docs if o.get("kind") in ("StatefulSet", "Deployment", "DaemonSet")]
    pod_labels = [w["spec"]["template"]["metadata"].get("labels", {}) for w in workloads]
    for o in docs:
        if o.get("kind") == "Service" and "selector" in o["spec"]:
            if not any(selects(o["spec"]["selector"], ls) for ls in pod_labels):
                fail(f"{name(o)}: its selector matches no pod template")
        if o.get("kind") == "PodDisruptionBudget":
            if not any(selects(o["spec"]["selector"].get("matchLabels"), ls) for ls in pod_labels):
                fail(f"{name(o)}: its selector matches no pod template")
    for w in workloads:
        t = w["spec"]["template"]
        labels = t["metadata"].get("labels", {})
        if not selects(w["spec"]["selector"].get("matchLabels"), labels):
            fail(f"{name(w)}: spec.selector does not match the template's labels")
        if w["kind"] == "StatefulSet":
            svc = by.get(("Service", w["spec"].get("serviceName")))
            if not svc or svc["spec"].get("clusterIP") != "None":
                fail(f"{name(w)}: serviceName {w['spec'].get('serviceName')!r} is no headless Service")
            elif not selects(svc["spec"].get("selector"), labels):
                fail(f"{name(w)}: Service/{svc['metadata']['name']} does not select its pods")
        spec = t["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        claims = {c["metadata"]["name"] for c in w["spec"].get("volumeClaimTemplates", [])}
        nets = json.loads(t["metadata"].get("annotations", {}).get(NETWORKS, "[]"))
        for n in nets:
            if ("NetworkAttachmentDefinition", n["name"]) not in by:
                fail(f"{name(w)}: network {n['name']!r}: no NetworkAttachmentDefinition")
        for v in volumes.values():
            cm = v.get("configMap")
            if cm and ("ConfigMap", cm["name"]) not in by:
                fail(f"{name(w)}: volume {v['name']}: no ConfigMap/{cm['name']}")
        for c in spec["containers"]:
            where = f"{name(w)}: container {c['name']}"
            ports = {p.get("name"): p for p in c.get("ports", [])}
            if None in ports:
                fail(f"{where}: a port without a name")
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                port = c.get(probe, {}).get("httpGet", {}).get("port")
                if isinstance(port, str) and port not in ports:
                    fail(f"{where}: {probe} port {port!r} is none of its ports")
            env = {e["name"] for e in c.get("env", [])}
            words = c.get("command", []) + c.get("args", [])
            for var in re.findall(r"\$\((\w+)\)", " ".join(words)):
                if var not in env:
                    fail(f"{where}: $({var}) is not in its env")
            mounts = [m["mountPath"] + "/" for m in c.get("volumeMounts", [])]
            for word in words:
                # Files it is given, outside the image's own directories, are mounted.
                if re.match(r"/(?!bin/|sbin/|usr/)", word) and not any(
                    word.startswith(m) for m in mounts
                ):
                    fail(f"{where}: {word}: under none of its mounts")
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes and m["name"] not in claims:
                    fail(f"{where}: mount {m['name']!r} is no volume")
                cm = volumes.get(m["name"], {}).get("configMap")
                data = by.get(("ConfigMap", cm["name"]), {}).get("data", {}) if cm else {}
                # Files of a mounted ConfigMap that the container is given must be keys.
                for word in words:
                    if cm and word.startswith(m["mountPath"] + "/"):
                        key = word[len(m["mountPath"]) + 1:]
                        if key not in data:
                            fail(f"{where}: {word}: ConfigMap/{cm['name']} has no key {key!r}")
            cluster = [x for x in words if x.startswith("--initial-cluster=")]
            if cluster:
                want = {f"{w['metadata']['name']}-{i}" for i in range(w["spec"]["replicas"])}
                svc = w["spec"]["serviceName"]
                have = dict(m.split("=", 1) for m in cluster[0].split("=", 1)[1].split(","))
                if set(have) != want:
                    fail(f"{where}: --initial-cluster names {sorted(have)}, its pods are {sorted(want)}")
                for m, url in have.items():
                    if f"//{m}.{svc}:" not in url:
                        fail(f"{where}: --initial-cluster: {url} is not {m}'s name in Service/{svc}")
    return by


def pod_names(sts):
    return [f"{sts['metadata']['name']}-{i}" for i in range(sts["spec"]["replicas"])]


def check_upf(by, upf):
    sts = by.get(("StatefulSet", "upf"))
    cm = by.get(("ConfigMap", "upf-config"))
    if not sts or not cm:
        fail("StatefulSet/upf and ConfigMap/upf-config: both needed")
        return
    data = cm.get("data", {})
    try:
        conf = tomllib.loads(data.get("upf.toml", ""))
    except tomllib.TOMLDecodeError as e:
        fail(f"ConfigMap/upf-config: upf.toml: {e}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "upf.toml"
        f.write_text(data["upf.toml"])
        for pod in pod_names(sts):
            cmd = [upf, "run", "--check", "--config", str(f), "--instance", pod]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                fail(f"upf-config upf.toml, --instance {pod}: {r.stderr.strip()}")
    cluster = conf.get("cluster", {})
    shards = cluster.get("shards", {})
    spec = sts["spec"]["template"]["spec"]
    ifaces = {n["interface"] for n in json.loads(
        sts["spec"]["template"]["metadata"].get("annotations", {}).get(NETWORKS, "[]"))}
    # The devices the upf and the sidecar use are the pods' secondary interfaces.
    for key in ("n3", "n6"):
        dev = conf.get(key, {}).get("interface")
        if dev and dev not in ifaces:
            fail(f"upf.toml {key}.interface {dev!r}: the pods have {sorted(ifaces)}")
    lines = [ln.split() for ln in data.get("addresses", "").splitlines()]
    lines = [ln for ln in lines if ln and not ln[0].startswith("#")]
    routes = [ln.split() for ln in data.get("routes", "").splitlines()]
    routes = [ln for ln in routes if ln and not ln[0].startswith("#")]
    for ln, dev in [(x, x[1:2]) for x in lines] + [(x, x[0:1]) for x in routes]:
        if len(ln) != 3 or dev[0] not in ifaces:
            fail(f"upf-config: {' '.join(ln)!r}: not 3 words, or {dev[0]!r} no pod interface")
    moved = {(ln[0], ln[2].split("/")[0]) for ln in lines if len(ln) == 3}
    for s, sc in shards.items():
        for ip in [sc.get("n4", "").rsplit(":", 1)[0]] + sc.get("n3", []):
            if (s, ip) not in moved:
                fail(f"upf-config addresses: shard {s}'s {ip} is not moved with it")
    for s, _ in moved:
        if s not in shards:
            fail(f"upf-config addresses: {s!r} is no shard of upf.toml")
    # etcd: its pods, on a client port of the Service named.
    etcd_hosts = {}
    for o in by.values():
        if o["kind"] == "StatefulSet":
            svc = by.get(("Service", o["spec"]["serviceName"]), {})
            ports = {p["port"] for p in svc.get("spec", {}).get("ports", [])}
            for p in pod_names(o):
                etcd_hosts[f"{p}.{o['spec']['serviceName']}"] = ports
    for url in cluster.get("etcd", []):
        m = re.fullmatch(r"http://([^:/]+):(\d+)", url)
        if not m or int(m.group(2)) not in etcd_hosts.get(m.group(1), ()):
            fail(f"upf.toml cluster.etcd: {url} is no pod and port of the example")
    admin = conf.get("admin", {}).get("address", "127.0.0.1:9464")
    for c in spec["containers"]:
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        if "ETCD_ENDPOINTS" in env and env["ETCD_ENDPOINTS"] != ",".join(cluster.get("etcd", [])):
            fail(f"container {c['name']}: ETCD_ENDPOINTS is not upf.toml's cluster.etcd")
        if "UPF_PREFIX" in env and env["UPF_PREFIX"] != cluster.get("prefix", "/upf"):
            fail(f"container {c['name']}: UPF_PREFIX is not upf.toml's cluster.prefix")
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        port = c.get("readinessProbe", {}).get("httpGet", {}).get("port")
        if c["name"] == "upf" and port is not None:
            if ports.get(port, port) != int(admin.rsplit(":", 1)[1]) or admin.startswith("127."):
                fail(f"upf readinessProbe: {port} does not reach admin.address {admin!r}")
    script = data.get("addr-mover.sh")
    if script is not None:
        r = subprocess.run(["sh", "-n"], input=script, capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"upf-config addr-mover.sh: {r.stderr.strip()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default=str(ROOT / "deploy/kubernetes"))
    ap.add_argument("--upf", default=str(ROOT / "target/debug/upf"), help="the upf binary")
    ap.add_argument("--k8s-version", default="1.30")
    a = ap.parse_args()
    if not os.access(a.upf, os.X_OK):
        sys.exit(f"check-k8s: no upf binary at {a.upf} (cargo build --bin upf; --upf PATH)")
    docs = render(Path(a.dir))
    if docs:
        validate(docs, a.k8s_version)
        try:
            check_upf(cross_check(docs), a.upf)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            fail(f"a required field is missing or malformed: {e!r}")
    for p in problems:
        print(f"check-k8s: {p}", file=sys.stderr)
    if problems or not docs:
        print(f"check-k8s: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check-k8s: {len(docs)} objects valid (Kubernetes {a.k8s_version}); "
          "upf.toml passes upf run --check for every upf pod")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/bin/sh
# check_k8s_manifests.sh [BUILD] - the Kubernetes example (docs/k8s/*.yaml,
# docs/kubernetes.md) parses and fits together: every YAML document parses
# (PyYAML) and has apiVersion, kind and a name; the qw-serve Deployment's
# probes ask /health on the port qw-serve listens on (its --port, on
# 0.0.0.0), its Prometheus annotations point at /metrics on that port, its
# grace period covers the preStop pause plus --shutdown-timeout, every flag it
# passes is one qw-serve accepts (tools/qw-serve/cli.c), the model path is on
# a mounted volume; the Service and the InferencePool select its pods and
# target that port; the endpoint picker is the pool's, reads metrics qw-serve
# exports (tools/qw-serve/metrics.c), and the HTTPRoute sends to the pool.
# Then each of a set of broken copies must be refused, so that every check
# can fail. Fast: no cluster, no server.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
python3 -c 'import yaml' 2>/dev/null || {
    echo "check_k8s_manifests: python3 has no yaml module: install python3-yaml (tools/deps.sh)" >&2
    exit 1
}
exec python3 - "$root" <<'EOF'
import copy
import glob
import os
import re
import sys

import yaml

root = sys.argv[1]
kdir = os.path.join(root, "docs", "k8s")
API = {"Deployment": "apps/v1", "Service": "v1", "PersistentVolumeClaim": "v1", "ServiceAccount": "v1",
       "Role": "rbac.authorization.k8s.io/v1", "RoleBinding": "rbac.authorization.k8s.io/v1",
       "InferencePool": "inference.networking.k8s.io/v1", "Gateway": "gateway.networking.k8s.io/v1",
       "HTTPRoute": "gateway.networking.k8s.io/v1"}
VALUELESS = {"--no-prefix-caching", "--log-requests"}      # qw-serve flags without a value


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


cli_src = read(os.path.join(root, "tools", "qw-serve", "cli.c"))
metrics_src = read(os.path.join(root, "tools", "qw-serve", "metrics.c"))


def parse_args(args):
    """qw-serve / EPP style arguments -> {flag: value}."""
    out, i = {}, 0
    while i < len(args):
        a = str(args[i])
        if "=" in a and a.startswith("--"):
            k, v = a.split("=", 1)
            out[k] = v
        elif a.startswith("--") and a not in VALUELESS and i + 1 < len(args):
            out[a] = str(args[i + 1])
            i += 1
        else:
            out[a] = None
        i += 1
    return out


def subset(sel, labels):
    return bool(sel) and all(labels.get(k) == v for k, v in sel.items())


def port_of(container, ref):
    """A probe's or Service's port (number or name) as a number, or None."""
    if isinstance(ref, int):
        return ref
    for p in container.get("ports") or []:
        if p.get("name") == ref:
            return p.get("containerPort")
    return None


def check(docs):
    """docs: {file: [documents]} -> list of problems."""
    errs = []
    err = errs.append
    allk = []
    for f, ds in docs.items():
        for d in ds:
            if not isinstance(d, dict) or not d.get("apiVersion") or not d.get("kind") or \
                    not (d.get("metadata") or {}).get("name"):
                err("%s: a document without apiVersion, kind or metadata.name" % f)
                continue
            if d["kind"] in API and d["apiVersion"] != API[d["kind"]]:
                err("%s: %s %s has apiVersion %s, not %s" % (f, d["kind"], d["metadata"]["name"],
                                                             d["apiVersion"], API[d["kind"]]))
            allk.append((f, d))

    def find(kind, name=None, fname=None):
        return [d for f, d in allk if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
                and (fname is None or f == fname)]

    deps = find("Deployment", "qw-serve", "deployment.yaml")
    if len(deps) != 1:
        return errs + ["deployment.yaml: no Deployment named qw-serve"]
    dep = deps[0]
    pod = dep["spec"]["template"]
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if not subset(dep["spec"].get("selector", {}).get("matchLabels"), labels):
        err("Deployment qw-serve: selector does not match its pod labels")
    cs = [c for c in pod["spec"].get("containers", []) if c.get("name") == "qw-serve"]
    if len(cs) != 1:
        return errs + ["Deployment qw-serve: no container named qw-serve"]
    c = cs[0]
    args = parse_args(c.get("args") or [])
    for flag in args:
        if not flag.startswith("--"):
            err("qw-serve container: argument %r is not a flag" % flag)
        elif cli_src is not None and ('"%s"' % flag) not in cli_src:
            err("qw-serve container: qw-serve has no flag %s (tools/qw-serve/cli.c)" % flag)
    port = int(args.get("--port") or 8000)
    if args.get("--host") != "0.0.0.0":
        err("qw-serve container: --host must be 0.0.0.0 (qw-serve listens on 127.0.0.1 by default: "
            "no probe or Service would reach it)")
    if port not in [p.get("containerPort") for p in c.get("ports") or []]:
        err("qw-serve container: no containerPort %d (the --port)" % port)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        pr = c.get(probe)
        hg = (pr or {}).get("httpGet") or {}
        if not pr:
            err("qw-serve container: no %s" % probe)
        elif hg.get("path") != "/health" or port_of(c, hg.get("port")) != port:
            err("qw-serve container: %s is not GET /health on port %d" % (probe, port))
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/path") != "/metrics" or \
            str(ann.get("prometheus.io/port")) != str(port):
        err("Deployment qw-serve: Prometheus annotations must be scrape \"true\", path /metrics, port %d" % port)
    shutdown = float(args.get("--shutdown-timeout") or 30)
    pre = ((c.get("lifecycle") or {}).get("preStop") or {})
    pause = 0.0
    cmd = (pre.get("exec") or {}).get("command") or []
    if len(cmd) == 2 and cmd[0] == "sleep":
        pause = float(cmd[1])
    elif "sleep" in pre:
        pause = float(pre["sleep"].get("seconds", 0))
    grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
    if grace < pause + shutdown:
        err("Deployment qw-serve: terminationGracePeriodSeconds %s < preStop %gs + --shutdown-timeout %gs"
            % (grace, pause, shutdown))
    res = c.get("resources") or {}
    for part in ("requests", "limits"):
        if not all(k in (res.get(part) or {}) for k in ("cpu", "memory")):
            err("qw-serve container: resources.%s needs cpu and memory" % part)
    model = args.get("--model") or ""
    vols = {v.get("name") for v in pod["spec"].get("volumes") or []}
    if not any(model.startswith(m.get("mountPath", "").rstrip("/") + "/") and m.get("name") in vols
               for m in c.get("volumeMounts") or []):
        err("qw-serve container: --model %r is on no mounted volume" % model)

    svcs = find("Service", "qw-serve", "service.yaml")
    if len(svcs) != 1:
        err("service.yaml: no Service named qw-serve")
    for s in svcs:
        if not subset(s["spec"].get("selector"), labels):
            err("Service qw-serve: selector does not match the qw-serve pods")
        if not any(port_of(c, p.get("targetPort", p.get("port"))) == port for p in s["spec"].get("ports") or []):
            err("Service qw-serve: no port targets %d" % port)

    pools = find("InferencePool", fname="inference-gateway.yaml")
    if len(pools) != 1:
        return errs + ["inference-gateway.yaml: no InferencePool"]
    pool = pools[0]
    ps = pool["spec"]
    if not subset((ps.get("selector") or {}).get("matchLabels"), labels):
        err("InferencePool: selector does not match the qw-serve pods")
    if [p.get("number") for p in ps.get("targetPorts") or []] != [port]:
        err("InferencePool: targetPorts must be [%d]" % port)
    ref = ps.get("endpointPickerRef") or {}
    esvc = find("Service", ref.get("name"))
    if len(esvc) != 1 or ref.get("kind", "Service") != "Service" or \
            (ref.get("port") or {}).get("number") not in [p.get("port") for p in esvc[0]["spec"].get("ports", [])]:
        err("InferencePool: endpointPickerRef names no Service port of this example")
    epp = [d for d in find("Deployment") if esvc and subset(esvc[0]["spec"].get("selector"),
                                                             d["spec"]["template"]["metadata"].get("labels") or {})]
    if len(epp) != 1:
        err("InferencePool: no endpoint picker Deployment behind its Service")
    else:
        eargs = {}
        for ec in epp[0]["spec"]["template"]["spec"]["containers"]:
            eargs.update(parse_args(ec.get("args") or []))
        if eargs.get("--pool-name") != pool["metadata"]["name"]:
            err("endpoint picker: --pool-name is not the InferencePool's name")
        want = {"--total-queued-requests-metric": ("vllm:num_requests_waiting",),
                "--kv-cache-usage-percentage-metric": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")}
        for flag, names in want.items():
            v = eargs.get(flag)
            if v not in names:
                err("endpoint picker: %s is %r, not one of %s" % (flag, v, ", ".join(names)))
            elif metrics_src is not None and v.split(":", 1)[1] not in metrics_src:
                err("endpoint picker: %s names %s, which tools/qw-serve/metrics.c does not export" % (flag, v))
        if epp[0]["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30) < grace:
            err("endpoint picker: its grace period is shorter than the pool's (%s s)" % grace)

    gws = {d["metadata"]["name"] for d in find("Gateway")}
    routes = find("HTTPRoute")
    ok = False
    for r in routes:
        if not all(p.get("name") in gws for p in r["spec"].get("parentRefs") or [{}]):
            err("HTTPRoute %s: a parentRef names no Gateway of this example" % r["metadata"]["name"])
        for rule in r["spec"].get("rules") or []:
            for b in rule.get("backendRefs") or []:
                if b.get("kind") == "InferencePool" and b.get("group") == "inference.networking.k8s.io" and \
                        b.get("name") == pool["metadata"]["name"]:
                    ok = True
    if not ok:
        err("inference-gateway.yaml: no HTTPRoute rule sends to the InferencePool "
            "(group inference.networking.k8s.io, kind InferencePool)")
    return errs


docs = {}
failed = 0
for path in sorted(glob.glob(os.path.join(kdir, "*.yaml"))):
    try:
        with open(path) as f:
            docs[os.path.basename(path)] = [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as e:
        print("FAIL %s: %s" % (path, e))
        failed += 1
for need in ("deployment.yaml", "service.yaml", "inference-gateway.yaml"):
    if need not in docs:
        print("FAIL docs/k8s/%s is missing" % need)
        failed += 1
if not os.path.exists(os.path.join(root, "docs", "kubernetes.md")):
    print("FAIL docs/kubernetes.md is missing")
    failed += 1
if failed:
    sys.exit(1)
problems = check(docs)
for p in problems:
    print("FAIL " + p)
if problems:
    sys.exit(1)
print("ok: %d documents in %d files" % (sum(len(v) for v in docs.values()), len(docs)))


# Broken copies: each must be refused, so that no check above is vacuous.
def dep_c(d):
    return [x for x in d["deployment.yaml"] if x["kind"] == "Deployment"][0]["spec"]["template"]


def mutate(fn):
    d = copy.deepcopy(docs)
    fn(d)
    return check(d)


def set_arg(d, flag, value):
    a = dep_c(d)["spec"]["containers"][0]["args"]
    a[a.index(flag) + 1] = value


def by_kind(d, f, kind):
    return [x for x in d[f] if x["kind"] == kind][0]


def epp_args(d):
    return [x for x in d["inference-gateway.yaml"] if x["kind"] == "Deployment"][0][
        "spec"]["template"]["spec"]["containers"][0]["args"]


broken = {
    "readiness probe on /healthz":
        lambda d: dep_c(d)["spec"]["containers"][0]["readinessProbe"]["httpGet"].update(path="/healthz"),
    "liveness probe on another port":
        lambda d: dep_c(d)["spec"]["containers"][0]["livenessProbe"]["httpGet"].update(port=9999),
    "qw-serve on another port": lambda d: set_arg(d, "--port", "8080"),
    "qw-serve on loopback": lambda d: set_arg(d, "--host", "127.0.0.1"),
    "drain longer than the grace period": lambda d: set_arg(d, "--shutdown-timeout", "60"),
    "a flag qw-serve lacks": lambda d: dep_c(d)["spec"]["containers"][0]["args"].append("--frobnicate"),
    "scrape path /stats": lambda d: dep_c(d)["metadata"]["annotations"].update({"prometheus.io/path": "/stats"}),
    "model outside the volume": lambda d: set_arg(d, "--model", "/opt/model"),
    "Service selecting other pods":
        lambda d: by_kind(d, "service.yaml", "Service")["spec"]["selector"].update({"app.kubernetes.io/name": "x"}),
    "pool on another port":
        lambda d: by_kind(d, "inference-gateway.yaml", "InferencePool")["spec"].update(targetPorts=[{"number": 1}]),
    "pool API still v1alpha2":
        lambda d: by_kind(d, "inference-gateway.yaml", "InferencePool").update(
            apiVersion="inference.networking.x-k8s.io/v1alpha2"),
    "route to another backend":
        lambda d: by_kind(d, "inference-gateway.yaml", "HTTPRoute")["spec"]["rules"][0]["backendRefs"][0].update(
            name="other"),
    "picker reading an unknown KV metric":
        lambda d: epp_args(d).__setitem__(
            [i for i, a in enumerate(epp_args(d)) if a.startswith("--kv-cache")][0],
            "--kv-cache-usage-percentage-metric=vllm:nothing"),
}
if cli_src is None:
    del broken["a flag qw-serve lacks"]       # nothing to hold the flags to without the source
for name, fn in broken.items():
    if not mutate(fn):
        print("FAIL the check accepts a broken copy: %s" % name)
        failed += 1
if failed:
    sys.exit(1)
print("ok: %d broken copies refused" % len(broken))
EOF

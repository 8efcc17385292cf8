#!/usr/bin/env python3
"""Checks the deploy/ files without a cluster: nginx accepts its configuration (nginx -t, as the
e2e tests wrap it), the Slurm and Kubernetes scripts parse, and the Indexed Job's shard count is
the same in `completions`, in `--shard auto/N` and in the merge's shard list."""
import pathlib
import re
import subprocess
import sys
import tempfile

import yaml

HERE = pathlib.Path(__file__).resolve().parent
problems = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        problems.append(what)


def nginx():
    site = (HERE / "nginx/rexvqa-web.conf").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        conf = pathlib.Path(tmp, "nginx.conf")
        conf.write_text(
            f"pid {tmp}/nginx.pid; error_log {tmp}/error.log;\nevents {{}}\n"
            f"http {{ include /etc/nginx/mime.types; client_body_temp_path {tmp}/b; proxy_temp_path {tmp}/p;"
            f" fastcgi_temp_path {tmp}/f; uwsgi_temp_path {tmp}/u; scgi_temp_path {tmp}/s;\n"
            + site.replace("listen 80;", "listen 127.0.0.1:1;") + "\n}\n")
        r = subprocess.run(["nginx", "-t", "-p", tmp, "-c", str(conf)], capture_output=True, text=True)
        check(r.returncode == 0, f"nginx -t accepts nginx/rexvqa-web.conf {r.stderr.strip()[-300:] if r.returncode else ''}")
    csp_hook = (HERE.parent / "scripts/csp-hook.mjs").read_text()
    page = re.findall(r'^\s+"([a-z-]+ [^"]*)",?$', csp_hook, re.M)
    header = re.search(r'Content-Security-Policy "([^"]*)"', site).group(1).split("; ")
    check(page and all(d in header for d in page),
          "the header's CSP has every directive of the page's (scripts/csp-hook.mjs)")


def scripts():
    for f in sorted((HERE / "slurm").iterdir()) + [HERE / "kubernetes/run.sh"]:
        r = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True)
        check(r.returncode == 0, f"bash -n {f.relative_to(HERE)} {r.stderr.strip()}")


def kubernetes():
    job = yaml.safe_load((HERE / "kubernetes/eval-job.yaml").read_text())
    merge = yaml.safe_load((HERE / "kubernetes/merge-job.yaml").read_text())
    spec = job["spec"]
    n = spec["completions"]
    check(spec.get("completionMode") == "Indexed", "eval-job.yaml is an Indexed Job")
    args = " ".join(spec["template"]["spec"]["containers"][0]["args"])
    check(f"--shard auto/{n}" in args, f"eval-job.yaml passes --shard auto/{n} (completions {n})")
    check("shard-$((JOB_COMPLETION_INDEX + 1)).json" in args, "eval-job.yaml names shard k by its index + 1")
    margs = " ".join(merge["spec"]["template"]["spec"]["containers"][0]["args"])
    check(f"shard-{{1..{n}}}.json" in margs, f"merge-job.yaml merges shard-{{1..{n}}}.json")
    for name in ("--split", "--model", "--mmproj"):
        a = re.search(rf"{name} (\S+)", args)
        b = re.search(rf"{name} (\S+)", margs)
        check(a and b and a.group(1) == b.group(1), f"the eval and merge Jobs give the same {name}")


nginx()
scripts()
kubernetes()
sys.exit(1 if problems else 0)

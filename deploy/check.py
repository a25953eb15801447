#!/usr/bin/env python3
"""Lint deploy/vk-observer.service (systemd user unit) and deploy/dev.vk-observer.plist (launchd);
deploy/check_fleet.py lints the fleet's files (vk-observer-fleet.service, nats-server.conf).

Python 3 standard library only; run from anywhere: `python3 deploy/check.py`. Prints one line per
check and `deploy-lint: N passed, M failed` at the end; exits 1 if any check failed.

Optional tools are used when present and skipped (not failed) when absent:
  - systemd-analyze: `systemd-analyze --user verify` on a temporary copy of the unit whose
    ExecStart= binary is swapped for /bin/true (the real one lives in ~/.cargo/bin and is
    normally not installed on a CI machine); its warnings are reported.
  - /bin/sh + curl: the ExecStartPost= readiness wait is run against tiny local HTTP servers.
  - plutil (macOS): `plutil -lint` on the plist.
"""

import argparse
import http.server
import os
import plistlib
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
UNIT = os.path.join(HERE, "vk-observer.service")
PLIST = os.path.join(HERE, "dev.vk-observer.plist")
README = os.path.join(HERE, "README.md")

DEFAULT_LISTEN = "127.0.0.1:8765"
DATA_DIR_REL = ".local/share/vk-observer"  # relative to the home directory, in both files
PLIST_HOME = "/Users/YOU"  # placeholder that deploy/README.md tells people to replace

results = {"passed": 0, "failed": 0, "skipped": 0}


def check(name, ok, detail="", note=""):
    """One line per check: `ok    name[: note]` or `FAIL  name: detail`."""
    results["passed" if ok else "failed"] += 1
    line = ("ok    " if ok else "FAIL  ") + name
    extra = note if ok else detail
    if extra:
        line += ": " + extra
    print(line)
    return ok


def skip(name, why):
    results["skipped"] += 1
    print("skip  " + name + ": " + why)


def warn(name, detail):
    print("warn  " + name + ": " + detail)


# --- systemd unit -------------------------------------------------------------------------------

# Keys this unit may use, per section (a typo guard that works without systemd installed).
KNOWN_KEYS = {
    "Unit": {
        "Description", "Documentation", "After", "Before", "Wants", "Requires", "Requisite",
        "BindsTo", "PartOf", "Upholds", "Conflicts", "StartLimitIntervalSec", "StartLimitBurst",
        "StartLimitAction", "ConditionPathExists", "ConditionPathIsDirectory",
        "ConditionFileIsExecutable", "AssertPathExists", "AssertFileIsExecutable",
    },
    "Service": {
        "Type", "ExecStart", "ExecStartPre", "ExecStartPost", "ExecCondition", "ExecReload",
        "ExecStop", "ExecStopPost", "Restart", "RestartSec", "RestartPreventExitStatus",
        "RestartForceExitStatus", "SuccessExitStatus", "TimeoutStartSec", "TimeoutStopSec",
        "TimeoutSec", "WatchdogSec", "KillMode", "KillSignal", "FinalKillSignal", "SendSIGKILL",
        "Environment", "EnvironmentFile", "PassEnvironment", "UnsetEnvironment",
        "WorkingDirectory", "SyslogIdentifier", "StandardOutput", "StandardError", "UMask",
        "LimitNOFILE", "Nice", "MemoryHigh", "MemoryMax", "CPUQuota", "NoNewPrivileges",
        "RestrictAddressFamilies", "LockPersonality", "MemoryDenyWriteExecute", "RestrictRealtime",
        "RestrictSUIDSGID", "RestrictNamespaces", "SystemCallArchitectures", "SystemCallFilter",
        "SystemCallErrorNumber", "ProtectSystem", "ProtectHome", "ReadWritePaths", "ReadOnlyPaths",
        "InaccessiblePaths", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
        "ProtectControlGroups", "ProtectHostname", "ProtectClock", "PrivateTmp", "PrivateDevices",
        "PrivateUsers", "PrivateMounts", "IPAddressAllow", "IPAddressDeny",
    },
    "Install": {"WantedBy", "RequiredBy", "Alias", "Also"},
}
# Keys systemd accepts more than once (list-valued); every other key must appear at most once.
REPEATABLE = {
    "Documentation", "After", "Before", "Wants", "Requires", "Requisite", "BindsTo", "PartOf",
    "Upholds", "Conflicts", "ConditionPathExists", "ConditionPathIsDirectory",
    "ConditionFileIsExecutable", "AssertPathExists", "AssertFileIsExecutable", "ExecStartPre",
    "ExecStartPost", "ExecCondition", "ExecReload", "ExecStop", "ExecStopPost",
    "RestartPreventExitStatus", "RestartForceExitStatus", "SuccessExitStatus", "Environment",
    "EnvironmentFile", "PassEnvironment", "UnsetEnvironment", "RestrictAddressFamilies",
    "SystemCallFilter", "SystemCallArchitectures", "ReadWritePaths", "ReadOnlyPaths",
    "InaccessiblePaths", "IPAddressAllow", "IPAddressDeny", "WantedBy", "RequiredBy", "Alias",
    "Also",
}
# Meaningless or refused in a per-user service manager.
SYSTEM_ONLY = {
    "User", "Group", "DynamicUser", "SupplementaryGroups", "AmbientCapabilities", "PAMName",
    "CapabilityBoundingSet",
}
TRUE = {"1", "yes", "true", "on"}


def parse_unit(path):
    """[(section, key, value, lineno)] and a list of syntax problems.

    Follows systemd's rules: '#'/';' comments, '[Section]' headers, 'Key=Value', and a trailing
    backslash continuing a line (replaced by a space; comment lines inside are dropped).
    """
    entries, problems = [], []
    section = None
    pending, start = None, 0
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if pending is not None:
            if line.startswith(("#", ";")):
                continue
            text = pending + line
        else:
            if not line or line.startswith(("#", ";")):
                continue
            text, start = line, n
        if text.endswith("\\"):
            pending = text[:-1] + " "
            continue
        pending = None
        if text.startswith("["):
            if not text.endswith("]"):
                problems.append(f"line {start}: bad section header {text!r}")
            section = text[1:-1]
            continue
        if "=" not in text:
            problems.append(f"line {start}: not Key=Value: {text!r}")
            continue
        if section is None:
            problems.append(f"line {start}: key outside any section")
            continue
        key, value = text.split("=", 1)
        entries.append((section, key.strip(), value.strip(), start))
    if pending is not None:
        problems.append("file ends inside a continued line")
    return entries, problems


def exec_argv(value):
    """argv of an Exec*= value, without systemd's special prefixes (-, +, !, @, :)."""
    argv = shlex.split(value, posix=True)
    if argv:
        argv[0] = argv[0].lstrip("-+!@:")
    return argv


def unescape(s):
    """What the process sees for systemd's '$$' and '%%' escapes."""
    return s.replace("$$", "$").replace("%%", "%")


def strip_path_prefix(p):
    return p.lstrip("-+")


def covers(parent, child):
    parent, child = parent.rstrip("/"), child.rstrip("/")
    return child == parent or child.startswith(parent + "/")


def seconds(v):
    """Seconds in a systemd time span such as 90, 90s, 1min 30s, 2min."""
    total, units = 0.0, {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", v.strip())
    if not parts:
        raise ValueError(v)
    for num, unit in parts:
        if unit not in units:
            raise ValueError(v)
        total += float(num) * units[unit]
    return total


def lint_unit():
    entries, problems = parse_unit(UNIT)
    check("unit: parses (sections, Key=Value, continuations)", not problems, "; ".join(problems))
    sections = {s for s, _, _, _ in entries}
    check("unit: has [Unit], [Service] and [Install]",
          {"Unit", "Service", "Install"} <= sections, f"found {sorted(sections)}")

    unknown = [f"[{s}] {k} (line {n})" for s, k, _, n in entries
               if k not in KNOWN_KEYS.get(s, set()) and not k.startswith("X-")]
    check("unit: only known keys in known sections", not unknown,
          "; ".join(unknown) + " (add to KNOWN_KEYS in deploy/check.py if valid)")
    sysonly = [f"{k} (line {n})" for _, k, _, n in entries if k in SYSTEM_ONLY]
    check("unit: no options reserved to system services", not sysonly, ", ".join(sysonly))

    seen, dups = {}, []
    for s, k, _, n in entries:
        if k in REPEATABLE:
            continue
        if (s, k) in seen:
            dups.append(f"{k} (lines {seen[(s, k)]} and {n})")
        seen.setdefault((s, k), n)
    check("unit: no duplicate single-valued keys", not dups, ", ".join(dups))

    svc = {}
    for s, k, v, _ in entries:
        if s == "Service":
            svc.setdefault(k, []).append(v)

    def one(k, default=None):
        return svc.get(k, [default])[-1]

    def flag(k):
        return (one(k, "") or "").lower() in TRUE

    # Type: notify only if the daemon actually calls sd_notify.
    typ = one("Type", "simple")
    notify_in_src = any(
        re.search(r"sd_notify|NOTIFY_SOCKET", open(os.path.join(d, f), encoding="utf-8",
                                                      errors="replace").read())
        for d, _, fs in os.walk(os.path.join(ROOT, "src")) for f in fs if f.endswith(".rs"))
    if typ == "notify":
        check("unit: Type=notify only with sd_notify support", notify_in_src,
              "the daemon never sends READY=1 (no sd_notify/NOTIFY_SOCKET in src/)")
    else:
        check("unit: Type is exec or simple", typ in ("exec", "simple"), f"Type={typ}")

    # ExecStart runs `vk-observer serve --data-dir DIR`.
    starts = svc.get("ExecStart", [])
    argv = exec_argv(starts[0]) if len(starts) == 1 else []
    check("unit: ExecStart runs `vk-observer serve`",
          len(argv) >= 2 and os.path.basename(argv[0]) == "vk-observer" and argv[1] == "serve",
          f"ExecStart={starts}")
    data_dir = None
    if "--data-dir" in argv[:-1]:
        data_dir = argv[argv.index("--data-dir") + 1]
    check("unit: ExecStart pins --data-dir under the home directory",
          data_dir == "%h/" + DATA_DIR_REL, f"--data-dir {data_dir!r}")

    # The sandbox lets the daemon write its data dir, which exists before namespace setup.
    rw = [strip_path_prefix(p) for v in svc.get("ReadWritePaths", []) for p in v.split()]
    check("unit: ReadWritePaths covers the data dir",
          data_dir is not None and any(covers(p, data_dir) for p in rw),
          f"ReadWritePaths={rw}, data dir {data_dir}")
    pre = [exec_argv(v) for v in svc.get("ExecStartPre", [])]
    check("unit: ExecStartPre creates the data dir outside the sandbox",
          any(a and os.path.basename(a[0]) == "mkdir" and "-p" in a and data_dir in a
              for a, raw in zip(pre, svc.get("ExecStartPre", [])) if raw.startswith("+")),
          "want ExecStartPre=+/bin/mkdir -p <data dir> (ReadWritePaths= needs it to exist)")
    env_vals = {}
    for v in svc.get("Environment", []):
        for item in shlex.split(v):
            k, _, val = item.partition("=")
            env_vals[k] = val
    if "VK_OBSERVER_DATA_DIR" in env_vals:
        check("unit: VK_OBSERVER_DATA_DIR agrees with --data-dir",
              env_vals["VK_OBSERVER_DATA_DIR"] == data_dir, env_vals["VK_OBSERVER_DATA_DIR"])

    check("unit: Restart=on-failure", one("Restart") == "on-failure", f"Restart={one('Restart')}")
    check("unit: RestartSec set", one("RestartSec") is not None)
    try:
        stop = seconds(one("TimeoutStopSec", ""))
    except ValueError:
        stop = None
    check("unit: TimeoutStopSec leaves time to flush sled on SIGTERM",
          stop is not None and stop >= 10 and one("KillSignal", "SIGTERM") == "SIGTERM",
          f"TimeoutStopSec={one('TimeoutStopSec')}, KillSignal={one('KillSignal', 'SIGTERM')}")

    envfiles = svc.get("EnvironmentFile", [])
    check("unit: optional EnvironmentFile=-%h/.config/vk-observer/env",
          "-%h/.config/vk-observer/env" in envfiles, f"EnvironmentFile={envfiles}")
    check("unit: Environment sets VK_OBSERVER_LISTEN to the default",
          env_vals.get("VK_OBSERVER_LISTEN") == DEFAULT_LISTEN, str(env_vals))
    bad_env = []
    if env_vals.get("VK_OBSERVER_LOG_JSON", "false") not in ("true", "false"):
        bad_env.append("VK_OBSERVER_LOG_JSON must be true or false")
    if env_vals.get("VK_OBSERVER_UPSTREAM", "x") == "":
        bad_env.append("empty VK_OBSERVER_UPSTREAM is rejected by the daemon")
    check("unit: Environment values are ones the daemon accepts", not bad_env, "; ".join(bad_env))

    check("unit: PrivateTmp is not enabled (VK's port file is in the real /tmp)",
          not flag("PrivateTmp"), f"PrivateTmp={one('PrivateTmp')}")
    families = set(" ".join(svc.get("RestrictAddressFamilies", [])).split())
    want = {
        "NoNewPrivileges": flag("NoNewPrivileges"),
        "ProtectSystem=strict": one("ProtectSystem") == "strict",
        "ProtectHome=read-only": one("ProtectHome") == "read-only",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX":
            families == {"AF_INET", "AF_INET6", "AF_UNIX"},
        "LockPersonality": flag("LockPersonality"),
        "MemoryDenyWriteExecute": flag("MemoryDenyWriteExecute"),
        "RestrictRealtime": flag("RestrictRealtime"),
        "SystemCallArchitectures=native": one("SystemCallArchitectures") == "native",
    }
    missing = [k for k, ok in want.items() if not ok]
    check("unit: sandboxing options set", not missing, "missing " + ", ".join(missing))

    wanted_by = [v for s, k, v, _ in entries if s == "Install" and k == "WantedBy"]
    check("unit: WantedBy=default.target (the user manager's target)",
          wanted_by == ["default.target"], f"WantedBy={wanted_by}")

    # Readiness wait.
    posts = svc.get("ExecStartPost", [])
    script = None
    for v in posts:
        a = exec_argv(v)
        if len(a) == 3 and a[1] == "-c" and "/readyz" in a[2]:
            script = a[2]
    check("unit: ExecStartPost polls /readyz with curl",
          script is not None and "curl" in script, f"ExecStartPost={posts}")
    if script is None:
        return data_dir
    lone = re.sub(r"\$\$", "", script)
    check("unit: every '$' in the readiness script is escaped as '$$'", "$" not in lone,
          "systemd would expand a single $ itself")
    m = re.search(r'-lt (\d+)', script)
    wait = int(m.group(1)) if m else None
    try:
        tstart = seconds(one("TimeoutStartSec", ""))
    except ValueError:
        tstart = None
    check("unit: TimeoutStartSec exceeds the readiness wait",
          wait is not None and tstart is not None and tstart > wait + 5,
          f"wait {wait} s, TimeoutStartSec={one('TimeoutStartSec')}")
    sh_script = unescape(script)
    if not os.path.exists("/bin/sh"):
        skip("unit: readiness script", "/bin/sh not found")
        return data_dir
    r = subprocess.run(["/bin/sh", "-n", "-c", sh_script], capture_output=True, text=True)
    check("unit: readiness script is valid sh (sh -n)", r.returncode == 0, r.stderr.strip())
    if shutil.which("curl") is None:
        skip("unit: readiness script against local servers", "curl not found")
    else:
        run_readiness_cases(sh_script, wait)
    return data_dir


class _Handler(http.server.BaseHTTPRequestHandler):
    codes = {}

    def do_GET(self):
        code = self.server.codes.get(self.path, 404)
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def _serve(codes):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.codes = codes
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_readiness_cases(sh_script, wait):
    """Run the ExecStartPost= script as systemd would, against three kinds of daemon."""
    short = re.sub(r"-lt \d+", "-lt 2", sh_script)  # 2 polls instead of `wait` for slow cases

    def run(script, listen):
        env = dict(os.environ)
        if listen is None:
            env.pop("VK_OBSERVER_LISTEN", None)
        else:
            env["VK_OBSERVER_LISTEN"] = listen
        return subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True,
                              text=True, timeout=wait + 30)

    ready = _serve({"/readyz": 200, "/healthz": 200})
    starting = _serve({"/readyz": 503, "/healthz": 200})
    try:
        port = ready.server_address[1]
        r = run(sh_script, f"127.0.0.1:{port}")
        check("unit: readiness wait succeeds once /readyz is 200", r.returncode == 0,
              f"exit {r.returncode}: {r.stderr.strip()}")
        r = run(sh_script, f"0.0.0.0:{port}")
        check("unit: readiness wait polls loopback for a 0.0.0.0 listen address",
              r.returncode == 0, f"exit {r.returncode}: {r.stderr.strip()}")
        r = run(short, f"127.0.0.1:{starting.server_address[1]}")
        check("unit: readiness wait leaves a live daemon up when VK is not ready",
              r.returncode == 0 and "readyz not 200" in r.stderr,
              f"exit {r.returncode}: {r.stderr.strip()}")
    finally:
        ready.shutdown()
        starting.shutdown()
    r = run(short, f"127.0.0.1:{_free_port()}")
    check("unit: readiness wait fails when nothing answers", r.returncode != 0,
          f"exit {r.returncode}")


def systemd_verify(data_dir, unit=None, file_name="vk-observer.service"):
    unit = unit or UNIT
    name = f"{file_name}: systemd-analyze --user verify"
    exe = shutil.which("systemd-analyze")
    if exe is None:
        skip(name, "systemd-analyze not found (install systemd to run it)")
        return
    with tempfile.TemporaryDirectory(prefix="vk-observer-verify-") as tmp:
        os.chmod(tmp, 0o700)
        unit_dir = os.path.join(tmp, "units")
        os.mkdir(unit_dir)
        text = open(unit, encoding="utf-8").read()
        # The real binary is %h/.cargo/bin/vk-observer, normally absent where CI runs: verify
        # would only say "Command ... is not executable". Point ExecStart= at /bin/true instead.
        swapped, n = re.subn(r"^ExecStart=\S*/vk-observer ", "ExecStart=/bin/true ", text,
                             flags=re.M)
        copy = os.path.join(unit_dir, file_name)
        with open(copy, "w", encoding="utf-8") as f:
            f.write(swapped)
        env = dict(os.environ)
        # A user manager needs $XDG_RUNTIME_DIR; containers and CI runners often lack one.
        if not env.get("XDG_RUNTIME_DIR") or not os.path.isdir(env["XDG_RUNTIME_DIR"]):
            env["XDG_RUNTIME_DIR"] = tmp
        env["SYSTEMD_LOG_COLOR"] = "0"
        r = subprocess.run([exe, "--user", "verify", copy], env=env, capture_output=True,
                           text=True, timeout=60)
        lines = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
        version = subprocess.run([exe, "--version"], capture_output=True,
                                 text=True).stdout.split("\n")[0]
        typos = [l for l in lines if re.search(r"Unknown (key|section|lvalue)|Invalid", l)]
        ok = r.returncode == 0 and n == 1 and not typos
        others = [l for l in lines if l not in typos]
        detail = f"exit {r.returncode}" + (f", ExecStart= swapped {n} times" if n != 1 else "")
        check(f"{name} ({version}, ExecStart binary swapped for /bin/true)", ok,
              detail + ": " + " | ".join(lines),
              f"{len(others)} warning(s) below" if others else "no warnings")
        for l in others:
            warn("systemd-analyze", l)
        # Exposure score, for information only (offline mode exists since systemd 250).
        r = subprocess.run([exe, "--user", "security", "--offline=true", "--no-pager", copy],
                           env=env, capture_output=True, text=True, timeout=60)
        m = re.search(r"Overall exposure level for \S+: (.*)", r.stdout)
        if m:
            print("info  systemd-analyze security: exposure " +
                  m.group(1).encode("ascii", "ignore").decode().strip() +
                  " (capability rows do not apply to an unprivileged user service)")


# --- launchd plist ------------------------------------------------------------------------------

KNOWN_PLIST_KEYS = {
    "Label", "Program", "ProgramArguments", "WorkingDirectory", "EnvironmentVariables",
    "RunAtLoad", "KeepAlive", "ThrottleInterval", "ExitTimeOut", "ProcessType",
    "StandardOutPath", "StandardErrorPath", "StandardInPath", "Umask", "Nice", "LowPriorityIO",
    "LimitLoadToSessionType", "AbandonProcessGroup", "Disabled",
}


def lint_plist(unit_data_dir):
    try:
        with open(PLIST, "rb") as f:
            pl = plistlib.load(f)
        parsed = isinstance(pl, dict)
        detail = "" if parsed else f"top level is {type(pl).__name__}, not a dict"
    except Exception as e:  # noqa: BLE001 - report any parse error as a failed check
        pl, parsed, detail = {}, False, str(e)
    check("plist: parses with plistlib (XML plist, dict at top level)", parsed, detail)
    if not parsed:
        return
    stem = os.path.splitext(os.path.basename(PLIST))[0]
    check("plist: Label is dev.vk-observer and matches the file name",
          pl.get("Label") == "dev.vk-observer" == stem, f"Label={pl.get('Label')!r}")
    unknown = sorted(set(pl) - KNOWN_PLIST_KEYS)
    check("plist: only known launchd keys", not unknown, ", ".join(unknown))
    args = pl.get("ProgramArguments")
    check("plist: ProgramArguments is a list of non-empty strings",
          isinstance(args, list) and args and all(isinstance(a, str) and a for a in args),
          repr(args))
    args = [a for a in args if isinstance(a, str)] if isinstance(args, list) else []
    check("plist: runs `<absolute path>/vk-observer serve`",
          len(args) >= 2 and args[0].startswith("/") and os.path.basename(args[0]) ==
          "vk-observer" and args[1] == "serve", repr(args[:2]))
    data_dir = args[args.index("--data-dir") + 1] if "--data-dir" in args[:-1] else None
    check("plist: --data-dir is the same home-relative dir as the unit's",
          data_dir == f"{PLIST_HOME}/{DATA_DIR_REL}" and unit_data_dir == "%h/" + DATA_DIR_REL,
          f"plist {data_dir!r}, unit {unit_data_dir!r}")
    check("plist: RunAtLoad is true", pl.get("RunAtLoad") is True, repr(pl.get("RunAtLoad")))
    ka = pl.get("KeepAlive")
    check("plist: KeepAlive restarts on failure (true or {SuccessfulExit: false})",
          ka is True or (isinstance(ka, dict) and ka.get("SuccessfulExit") is False), repr(ka))
    env = pl.get("EnvironmentVariables", {})
    bad = []
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str)
                                          for k, v in env.items())):
        bad.append("EnvironmentVariables must map strings to strings")
        env = {}
    if env.get("VK_OBSERVER_LISTEN") != DEFAULT_LISTEN:
        bad.append(f"VK_OBSERVER_LISTEN={env.get('VK_OBSERVER_LISTEN')!r}")
    if env.get("VK_OBSERVER_LOG_JSON", "false") not in ("true", "false"):
        bad.append("VK_OBSERVER_LOG_JSON must be true or false")
    if env.get("VK_OBSERVER_UPSTREAM", "x") == "":
        bad.append("empty VK_OBSERVER_UPSTREAM is rejected by the daemon")
    check("plist: EnvironmentVariables are ones the daemon accepts", not bad, "; ".join(bad))
    logs = [pl.get("StandardOutPath"), pl.get("StandardErrorPath")]
    check("plist: stdout/stderr go to ~/Library/Logs/vk-observer/",
          all(isinstance(p, str) and p.startswith(f"{PLIST_HOME}/Library/Logs/vk-observer/")
              for p in logs), repr(logs))
    check("plist: ProcessType is a launchd value",
          pl.get("ProcessType") in ("Background", "Standard", "Adaptive", "Interactive"),
          repr(pl.get("ProcessType")))
    paths = [a for a in args if a.startswith("/")] + [p for p in logs if isinstance(p, str)]
    if isinstance(pl.get("WorkingDirectory"), str):
        paths.append(pl["WorkingDirectory"])
    odd = [p for p in paths if not (p == PLIST_HOME or p.startswith(PLIST_HOME + "/"))]
    check(f"plist: every path uses the {PLIST_HOME} placeholder deploy/README.md replaces",
          not odd, ", ".join(odd))
    plutil = shutil.which("plutil")
    if plutil is None:
        skip("plist: plutil -lint", "plutil not found (macOS only)")
    else:
        r = subprocess.run([plutil, "-lint", PLIST], capture_output=True, text=True)
        check("plist: plutil -lint", r.returncode == 0, (r.stdout + r.stderr).strip())


def lint_readme():
    try:
        text = open(README, encoding="utf-8").read()
    except OSError as e:
        check("README: exists", False, str(e))
        return
    needles = ["systemctl --user daemon-reload", "systemctl --user enable --now vk-observer",
               "journalctl --user -u vk-observer", "launchctl bootstrap gui/", "launchctl bootout",
               PLIST_HOME, "/readyz", "VK_OBSERVER_UPSTREAM"]
    missing = [n for n in needles if n not in text]
    check("README: documents install, logs, the plist placeholder and readiness", not missing,
          "missing " + ", ".join(missing))


def guarded(what, fn, *args):
    """Run one linter; a crash (e.g. on a badly broken file) counts as a failed check."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001
        check(f"{what}: linter ran to completion", False, f"{type(e).__name__}: {e}")
        return None


def main():
    global UNIT, PLIST, README
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--unit", default=UNIT, help="systemd unit to lint (default: %(default)s)")
    ap.add_argument("--plist", default=PLIST, help="launchd plist to lint (default: %(default)s)")
    ap.add_argument("--readme", default=README, help="deploy README (default: %(default)s)")
    a = ap.parse_args()
    UNIT, PLIST, README = a.unit, a.plist, a.readme
    data_dir = guarded("unit", lint_unit)
    guarded("unit: systemd-analyze", systemd_verify, data_dir)
    guarded("plist", lint_plist, data_dir)
    guarded("README", lint_readme)
    import check_fleet  # the fleet's files (deploy/check_fleet.py)
    check_fleet.lint_all(sys.modules[__name__])
    summary = f"deploy-lint: {results['passed']} passed, {results['failed']} failed"
    if results["skipped"]:
        summary += f", {results['skipped']} skipped"
    print(summary)
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""The SSH twin's server process: one loopback listening socket per switch, paramiko's server API.

Not fakenos (the brief's first choice): fakenos 1.2.1 pins ``paramiko<=4.0`` and ``detect==2020.12.*``
(sdist only), while netmiko 4.8 brings paramiko 5.1, so the twin is built on
``paramiko.ServerInterface`` + ``Transport`` directly. Each switch gets its own port, prompt and
password; the shell echoes input like a real CLI (netmiko strips the echo) and answers the NOS's
session-preparation commands (Junos ``set cli ...``) the way the NOS does.

Faults (``fault`` in the config): ``auth`` rejects every password; ``hang`` accepts the session
and never answers the LLDP command; ``garbage`` answers it with binary junk.

Run as ``python -m simulator.ssh.server CONFIG.json``; it prints ``ready`` when listening.
"""

from __future__ import annotations

import json
import selectors
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import paramiko  # type: ignore[import-untyped]

SESSION_REPLIES = {
    # Junos answers netmiko's session preparation with these lines (netmiko waits for them).
    "set cli screen-width 511": "Screen width set to 511",
    "set cli complete-on-space off": "Disabling complete-on-space",
    "set cli screen-length 0": "Screen length set to 0",
    # EOS: netmiko waits for these confirmations.
    "terminal width 511": "Width set to 511 columns.",
    "terminal length 0": "Pagination disabled.",
}


def prompt_for(platform: str, name: str, username: str) -> str:
    if platform == "juniper_junos":
        return f"{username}@{name}> "
    if platform == "mellanox_mlnxos":
        return f"{name} [standalone: master] # "
    if platform in ("sonic", "cumulus", "linux"):
        return f"{username}@{name}:~$ "
    return f"{name}# "


class Switch(paramiko.ServerInterface):
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.shell = threading.Event()

    def check_auth_password(self, username: str, password: str) -> int:
        if self.cfg.get("fault") == "auth":
            return paramiko.AUTH_FAILED
        if username == self.cfg["username"] and password == self.cfg["password"]:
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def get_allowed_auths(self, username: str) -> str:
        return "password"

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_pty_request(self, *args: Any) -> bool:
        return True

    def check_channel_shell_request(self, channel: paramiko.Channel) -> bool:
        self.shell.set()
        return True


def _send(chan: paramiko.Channel, text: str | bytes) -> None:
    data = text.encode() if isinstance(text, str) else text
    for i in range(0, len(data), 32768):
        chan.sendall(data[i : i + 32768])


def answer(cfg: dict[str, Any], line: str) -> str | bytes | None:
    """The reply to one command line; None: hang (never answer)."""
    if line in SESSION_REPLIES:
        return SESSION_REPLIES[line]
    if line == cfg["command"]:
        if cfg.get("fault") == "hang":
            return None
        if cfg.get("fault") == "garbage":
            return bytes(range(256)) * 4
        return str(cfg["output"])
    return ""  # terminal length 0, terminal width, enable ...: accepted silently


def serve_shell(chan: paramiko.Channel, cfg: dict[str, Any]) -> None:
    prompt = prompt_for(cfg["platform"], cfg["name"], cfg["username"])
    _send(chan, prompt)
    buf = ""
    while True:
        data = chan.recv(4096)
        if not data:
            return
        for ch in data.decode(errors="replace"):
            if ch in "\r\n":
                line, buf = buf.strip(), ""
                _send(chan, "\r\n")
                if line in ("exit", "quit", "logout"):
                    chan.close()
                    return
                reply = answer(cfg, line) if line else ""
                if reply is None:
                    while not chan.closed:  # the hanging session: holds the channel, says nothing
                        time.sleep(0.5)
                    return
                if reply:
                    body = reply.replace(b"\n", b"\r\n") if isinstance(reply, bytes) else reply.replace("\n", "\r\n")
                    _send(chan, body)
                    _send(chan, "\r\n")
                _send(chan, prompt)
            elif ch in "\x08\x7f":
                buf = buf[:-1]
            else:
                buf += ch
                _send(chan, ch)


def handle(sock: socket.socket, cfg: dict[str, Any], host_key: paramiko.PKey) -> None:
    transport = paramiko.Transport(sock)
    try:
        transport.add_server_key(host_key)
        server = Switch(cfg)
        transport.start_server(server=server)
        chan = transport.accept(20)
        if chan is None:
            return
        server.shell.wait(10)
        serve_shell(chan, cfg)
    except (paramiko.SSHException, OSError, EOFError):
        pass
    finally:
        transport.close()


def serve(config: dict[str, Any]) -> None:
    host_key = paramiko.RSAKey(filename=config["host_key"])
    selector = selectors.DefaultSelector()  # epoll: no FD_SETSIZE limit for thousands of switches
    for sw in config["switches"]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((config["host"], sw["port"]))
        sock.listen(64)
        selector.register(sock, selectors.EVENT_READ, sw)
    print("ready", flush=True)
    while True:
        for key, _ in selector.select(timeout=1.0):
            conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
            threading.Thread(target=handle, args=(conn, key.data, host_key), daemon=True).start()


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    outputs = json.loads(Path(config["outputs"]).read_text())
    for sw in config["switches"]:
        sw["output"] = outputs.get(sw["name"], "")
    serve(config)


if __name__ == "__main__":
    main()

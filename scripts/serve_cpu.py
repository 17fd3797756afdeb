"""A context manager shared by the serving benchmarks in scripts/: `aiinfra serve` on the CPU backend on a
given port, started, waited for (/health), and stopped with SIGTERM on exit."""
import contextlib
import subprocess
import time
import urllib.request


@contextlib.contextmanager
def cpu_server(binary, model, port, threads, extra=()):
    srv = subprocess.Popen([binary, "serve", "-m", model, "--backend", "cpu", "-t", str(threads), "--port", str(port),
                            "--ctx", "2048", *extra], stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except Exception:
                time.sleep(0.1)
        yield
    finally:
        srv.terminate()
        srv.wait()

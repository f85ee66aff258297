"""The executors' own interpreter and extra site-packages: the PYTHONPATH they
get, the runtime directory of links and what a sandbox must bind (a real
interpreter is probed; tests/e2e/test_function_dependencies.py runs functions)."""
import os
import sys

from blockx.adapters.executor.executor_env import RUNTIME_PACKAGES, ExecutorEnvironment, executor_env_problems


def test_the_workers_own_python_with_site_packages(tmp_path):
    env = ExecutorEnvironment("", [str(tmp_path)])
    assert env.own_python and env.python == sys.executable
    assert env.extra_env({"PYTHONPATH": "/src"}) == {"PYTHONPATH": f"{tmp_path}{os.pathsep}/src"}
    assert env.readonly_paths() == (os.path.realpath(tmp_path),)
    assert ExecutorEnvironment().extra_env({"PYTHONPATH": "/src"}) == {}      # nothing to add
    env.close()


def test_an_executor_python_gets_the_runtime_first_and_not_the_workers_path(tmp_path):
    env = ExecutorEnvironment(sys.executable, [str(tmp_path)])
    try:
        assert not env.own_python
        links = sorted(os.listdir(env.runtime_dir))
        assert links == sorted(RUNTIME_PACKAGES)                             # nothing else of the Worker's
        assert all(os.path.islink(os.path.join(env.runtime_dir, n)) for n in links)
        assert oct(os.stat(env.runtime_dir).st_mode & 0o777) == "0o755"
        extra = env.extra_env({"PYTHONPATH": "/worker/only"})
        assert extra["PYTHONPATH"] == f"{env.runtime_dir}{os.pathsep}{tmp_path}"
        ro = env.readonly_paths()
        assert os.path.realpath(env.runtime_dir) in ro and os.path.realpath(sys.base_prefix) in ro
        assert "python" in env.describe()
    finally:
        env.close()
    assert not os.path.exists(env.runtime_dir)


def test_problems_name_the_setting(tmp_path):
    assert executor_env_problems(sys.executable, [str(tmp_path)]) == []
    assert "must be an absolute path" in executor_env_problems("python3", [])[0]
    assert "cannot run" in executor_env_problems(str(tmp_path / "nope"), [])[0]
    assert "is not an absolute path to a directory" in executor_env_problems("", [str(tmp_path / "x")])[0]

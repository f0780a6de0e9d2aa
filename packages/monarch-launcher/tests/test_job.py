"""JobTrait's lifecycle and cache, JobState, pickling, LocalJob: with a job
whose scheduler is a list in a file (no workers needed)."""

import os
import pickle
import stat

import pytest

from monarch_launcher import (
    DEFAULT_JOB_PATH,
    JOB_CACHE_ENV,
    JobState,
    JobTrait,
    LocalJob,
    Unsupported,
    job_file,
    job_load,
    job_loads,
)


class Ledger(JobTrait):
    """A job whose 'scheduler' is a file that records what happened to it."""

    def __init__(self, ledger, size=1):
        super().__init__()
        self.ledger = str(ledger)
        self.size = size
        self.alive = True

    def _write(self, line):
        with open(self.ledger, "a") as f:
            f.write(line + "\n")

    def _create(self, client_script):
        self._write(f"create {self.size}")

    def _state(self):
        self._write(f"state {self.size}")
        return JobState({"workers": f"mesh of {self.size}"})

    def can_run(self, spec):
        return isinstance(spec, Ledger) and spec.size == self.size and self.alive

    def _kill(self):
        self._write(f"kill {self.size}")


def events(ledger):
    return ledger.read_text().split("\n")[:-1] if ledger.exists() else []


def test_state_applies_caches_and_a_later_spec_reuses_the_cached_job(in_tmp):
    ledger = in_tmp / "ledger"
    first = Ledger(ledger)
    assert not first.active and first.apply_id is None
    assert first.state().workers == "mesh of 1"
    assert first.active and first.apply_id is not None
    cache = job_file(DEFAULT_JOB_PATH)
    assert cache.startswith(str(in_tmp / "state" / "jobs" / "cache"))
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o600
    assert not os.path.exists(DEFAULT_JOB_PATH)  # nothing in the working folder
    second = Ledger(ledger)  # a later run of the same script
    assert second.state().workers == "mesh of 1"
    assert second.apply_id == first.apply_id  # the cached job's allocation
    assert events(ledger) == ["create 1", "state 1", "state 1"]
    second.state()  # running now: no cache lookup, no create
    assert events(ledger)[-1] == "state 1" and events(ledger).count("create 1") == 1


def test_a_cached_job_that_cannot_run_the_spec_is_killed_and_replaced(in_tmp):
    ledger = in_tmp / "ledger"
    Ledger(ledger, size=1).state()
    bigger = Ledger(ledger, size=2)
    bigger.state()
    assert events(ledger) == ["create 1", "state 1", "kill 1", "create 2", "state 2"]
    assert job_load().size == 2  # the cache now holds the new job


def test_cached_path_none_neither_reads_nor_writes_a_cache(in_tmp):
    ledger = in_tmp / "ledger"
    Ledger(ledger).state()
    other = Ledger(ledger)
    other.state(cached_path=None)
    assert events(ledger).count("create 1") == 2
    assert job_load().apply_id != other.apply_id


def test_an_unreadable_cache_is_ignored(in_tmp):
    cache = job_file(DEFAULT_JOB_PATH)
    with open(cache, "wb") as f:
        f.write(b"not a pickle")
    os.chmod(cache, 0o600)
    ledger = in_tmp / "ledger"
    Ledger(ledger).state()
    assert events(ledger) == ["create 1", "state 1"]


def test_apply_is_idempotent_and_kill_ends_the_job(in_tmp):
    ledger = in_tmp / "ledger"
    job = Ledger(ledger)
    job.apply()
    job.apply()
    job.kill()
    assert not job.active and job.apply_id is None
    job.kill()  # a job that does not run: nothing to do
    assert events(ledger) == ["create 1", "kill 1"]


def test_dump_is_private_and_round_trips(in_tmp):
    job = Ledger(in_tmp / "ledger")
    job.apply()
    job.dump("sub/dir/job.pkl")
    assert stat.S_IMODE(os.stat("sub/dir/job.pkl").st_mode) == 0o600
    loaded = job_load("sub/dir/job.pkl")
    assert isinstance(loaded, Ledger) and loaded.active and loaded.apply_id == job.apply_id
    assert job_loads(job.dumps()).apply_id == job.apply_id
    os.symlink("sub/dir/job.pkl", "link.pkl")
    job.dump("link.pkl")  # a symlink is followed, not replaced
    assert os.path.islink("link.pkl")


def test_loading_something_that_is_not_a_job_says_so(in_tmp):
    with open("x.pkl", "wb") as f:
        pickle.dump({"a": 1}, f)
    os.chmod("x.pkl", 0o600)
    with pytest.raises(TypeError, match=r"x\.pkl: the data holds a dict, not a job"):
        job_load("x.pkl")
    with pytest.raises(FileNotFoundError):
        job_load("missing.pkl")


class Planted:
    """What another user leaves in a shared working folder: unpickling it runs code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant(path, marker, *, mode=0o600, owner=None):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(pickle.dumps(Planted(marker)))
    os.chmod(path, mode)
    if owner is not None:
        os.chown(path, owner, owner)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_job_cache_another_user_planted_is_never_unpickled(in_tmp, caplog):
    marker = in_tmp / "ran"
    # in a shared working folder, where Monarch keeps its cache: not even looked at
    plant(DEFAULT_JOB_PATH, marker, owner=65534)
    ledger = in_tmp / "ledger"
    Ledger(ledger).state()
    assert events(ledger) == ["create 1", "state 1"]
    assert not marker.exists()
    # and a file of another user's where this user's cache lives: refused, with a warning
    cache = job_file(DEFAULT_JOB_PATH)
    plant(cache, marker, owner=65534)
    with pytest.raises(PermissionError, match="belongs to uid 65534"):
        job_load()
    Ledger(ledger).state()  # ignored; a fresh job is applied
    assert events(ledger)[-2:] == ["create 1", "state 1"]
    assert "belongs to uid 65534" in caplog.text
    assert not marker.exists()


def test_the_cache_is_one_per_folder_and_can_be_named(in_tmp, monkeypatch):
    here = job_file(DEFAULT_JOB_PATH)
    (in_tmp / "elsewhere").mkdir()
    monkeypatch.chdir(in_tmp / "elsewhere")
    assert job_file(DEFAULT_JOB_PATH) != here
    assert job_file("x.pkl") == "x.pkl"
    monkeypatch.setenv(JOB_CACHE_ENV, str(in_tmp / "named.pkl"))
    assert job_file(DEFAULT_JOB_PATH) == str(in_tmp / "named.pkl")


@pytest.mark.parametrize("mode", [0o644, 0o666, 0o620])
def test_a_job_file_others_may_read_or_write_is_refused(in_tmp, mode):
    marker = in_tmp / "ran"
    plant("job.pkl", marker, mode=mode)
    with pytest.raises(PermissionError, match=f"has mode {mode:04o}"):
        job_load("job.pkl")
    assert not marker.exists()


def test_a_job_file_in_a_folder_others_may_write_is_refused(in_tmp):
    marker = in_tmp / "ran"
    plant("shared/job.pkl", marker)
    os.chmod("shared", 0o777)  # anyone could have swapped the file in
    with pytest.raises(PermissionError, match="the folder of the job file"):
        job_load("shared/job.pkl")
    assert not marker.exists()


def test_job_state_names_its_meshes():
    state = JobState({"trainers": "T", "dataloaders": "D"})
    assert state.trainers == "T" and state.dataloaders == "D"
    with pytest.raises(AttributeError) as error:
        _ = state.x
    assert str(error.value) == (
        "'x' is not a valid host mesh name. Available names: dataloaders, trainers"
    )
    assert repr(state) == "JobState(hosts={'trainers': 'T', 'dataloaders': 'D'})"
    assert {"trainers", "dataloaders"} <= set(dir(state))
    assert pickle.loads(pickle.dumps(state)).trainers == "T"


def test_default_job_path_is_monarchs():
    assert DEFAULT_JOB_PATH == ".monarch/job_state.pkl"


def test_local_job_gives_this_host_under_every_name(in_tmp):
    job = LocalJob(("trainers", "dataloaders"))
    state = job.state(cached_path=None)
    assert dict(state.trainers.extent.items()) == {}
    assert dict(state.dataloaders.extent.items()) == {}
    assert job.can_run(LocalJob(("trainers", "dataloaders"))) is False
    assert job_loads(job.dumps()).active
    job.kill()  # leaves this process's own host alone
    assert dict(LocalJob().state(cached_path=None).hosts.extent.items()) == {}


def test_local_job_runs_a_client_script(in_tmp):
    (in_tmp / "client.py").write_text(
        "import os\nprint('batch', os.environ['MONARCH_BATCH_JOB'])\n"
    )
    job = LocalJob()
    job.apply(client_script="client.py")
    assert job.client_pid is not None and job.log_dir is not None
    os.waitpid(job.client_pid, 0)  # our child: wait for it to end
    with open(os.path.join(job.log_dir, "stdout.log")) as f:
        assert f.read() == "batch 1\n"
    job.kill()


@pytest.mark.parametrize("name", ["remote_mount", "gather_mount"])
def test_what_is_not_available_says_so(name):
    with pytest.raises(Unsupported, match=name):
        getattr(LocalJob(), name)("x")

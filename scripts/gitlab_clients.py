"""GitLab's own clients, from PyPI and unpatched, against a running `gantry server`.

Run by scripts/test-gitlab-clients.sh (which installs them) from the `gantry` crate's
test `gitlab_clients_from_pypi_work_against_the_server`:

    gitlab_clients.py URL ADMIN_TOKEN REGISTRATION_TOKEN REPOSITORY WORK_DIR

- python-gitlab: the calls a team makes every day (auth, version, projects and search,
  variables, the CI/CD job token scope and its allowlists, personal access tokens, runners and project runners, pipelines create /
  list / get / cancel / retry, jobs list / trace / artifacts, pipeline schedules and
  trigger tokens, the repository's files, commits and branches, namespaces, a job's
  runner and runner manager).
- gitlab-runner-api: registers (JSON, `POST /runners/` with a trailing slash), takes a
  job, acknowledges it with a `PUT /jobs/:id` without `state`, streams its log with
  `PATCH …/trace` and finishes it.
- gitlab-python-runner: registers with a form body, runs a job with its shell executor
  (clone over git HTTP, the script, an artifact upload) and finishes it.
- Debian's gitlab-cli (`/usr/bin/python-gitlab`, python-gitlab 3.12's command line) and
  ruby-gitlab (`/usr/bin/ruby-gitlab`, the `gitlab` gem 4.17's): the current user, the
  version, pipelines, a pipeline's jobs and a job's log, as a team reads them in a terminal.

Every step prints `ok - <call>` or `FAILED - <call>: <why>`; the last line is
`N passed, M failed` and the exit status is 1 when a step failed.
"""

import io
import json
import os
import subprocess
import sys
import time
import traceback
import zipfile

import gitlab
from gitlab_runner_api import Runner as ApiRunner

URL, ADMIN, REGISTRATION, REPOSITORY, WORK = sys.argv[1:6]
PASSED = []
FAILED = []


def step(name):
    def run(fn):
        try:
            fn()
        except Exception as error:  # noqa: BLE001 - every failure is reported
            FAILED.append(name)
            print(f"FAILED - {name}: {error!r}", flush=True)
            traceback.print_exc()
        else:
            PASSED.append(name)
            print(f"ok - {name}", flush=True)
        return fn

    return run


def expect(condition, what):
    if not condition:
        raise AssertionError(what)


gl = gitlab.Gitlab(URL, private_token=ADMIN)
state = {}


@step("gl.auth()")
def _():
    gl.auth()
    expect(gl.user.username == "root", f"user {gl.user.username}")
    expect(gl.user.is_admin, "the admin token's user is an administrator")
    found = gl.users.list(username="root")
    expect([u.id for u in found] == [gl.user.id], f"users.list(username=…): {found}")


@step("gl.version()")
def _():
    version, revision = gl.version()
    expect(version != "unknown" and revision != "unknown", f"{version} {revision}")


@step("projects.create")
def _():
    state["project"] = gl.projects.create({"name": "clients/demo", "import_url": REPOSITORY})
    state["other"] = gl.projects.create({"name": "clients/other", "import_url": REPOSITORY})


@step("projects.list(search=…), simple, order_by, get")
def _():
    project = state["project"]
    found = gl.projects.list(search="DEMO")
    expect([p.id for p in found] == [project.id], f"search found {[p.path_with_namespace for p in found]}")
    expect(gl.projects.list(search="nothing-like-this") == [], "search without a match")
    simple = gl.projects.list(simple=True, order_by="id", sort="asc", membership=True, owned=True)
    expect([p.id for p in simple] == [project.id, state["other"].id], "simple, ordered by id")
    expect(gl.projects.get("clients/demo").id == project.id, "get by path")


@step("project.variables create/list/get/update/delete")
def _():
    variables = state["project"].variables
    variables.create({"key": "GREETING", "value": "hello"})
    variables.create({"key": "SCRATCH", "value": "x", "masked": False})
    expect({v.key for v in variables.list()} == {"GREETING", "SCRATCH"}, "listed")
    greeting = variables.get("GREETING")
    greeting.value = "hello from a variable"
    greeting.save()
    expect(variables.get("GREETING").value == "hello from a variable", "updated")
    variables.delete("SCRATCH")
    expect([v.key for v in variables.list()] == ["GREETING"], "deleted")


@step("project.job_token_scope get/save, allowlist and groups_allowlist create/list/delete")
def _():
    project, other = state["project"], state["other"]
    scope = project.job_token_scope.get()
    expect((scope.inbound_enabled, scope.outbound_enabled) == (True, False), "new: limited")
    scope.enabled = False
    scope.save()
    scope.refresh()
    expect(scope.inbound_enabled is False, "turned off")
    project.job_token_scope.update(new_data={"enabled": True})
    scope.refresh()
    expect(scope.inbound_enabled is True, "turned on")
    added = scope.allowlist.create({"target_project_id": other.id})
    expect(added.target_project_id == other.id, "created")
    expect([p.id for p in scope.allowlist.list()] == [project.id, other.id], "listed, itself first")
    scope.allowlist.delete(other.id)
    expect([p.id for p in scope.allowlist.list()] == [project.id], "deleted")
    group = gl.groups.get("clients")
    scope.groups_allowlist.create({"target_group_id": group.id})
    expect([g.id for g in scope.groups_allowlist.list()] == [group.id], "a group listed")
    scope.groups_allowlist.delete(group.id)
    expect(scope.groups_allowlist.list() == [], "the group deleted")


@step("personal access tokens: create, read_api, revoke")
def _():
    user = gl.users.get(gl.user.id)
    token = user.personal_access_tokens.create(
        {"name": "dashboards", "scopes": ["read_api"], "expires_at": "2999-01-01"}
    )
    reader = gitlab.Gitlab(URL, private_token=token.token)
    reader.auth()
    expect(reader.user.username == "root", "a token's user")
    expect(len(reader.projects.list()) == 2, "read_api reads")
    try:
        reader.projects.get(state["project"].id, lazy=True).pipelines.create({"ref": "main"})
        raise AssertionError("read_api created a pipeline")
    except gitlab.exceptions.GitlabCreateError as error:
        expect(error.response_code == 403, f"answer {error.response_code}")
    expect(token.id in [t.id for t in gl.personal_access_tokens.list()], "listed")
    gl.personal_access_tokens.delete(token.id)
    try:
        reader.auth()
        raise AssertionError("a revoked token still works")
    except gitlab.exceptions.GitlabAuthenticationError:
        pass


@step("pipelines.create, list, get")
def _():
    project = state["project"]
    pipeline = project.pipelines.create({"ref": "main"})
    state["pipeline"] = pipeline
    expect(pipeline.status in ("created", "pending"), pipeline.status)
    expect(pipeline.id in [p.id for p in project.pipelines.list()], "listed")
    expect(project.pipelines.get(pipeline.id).ref == "main", "get")
    names = sorted(j.name for j in pipeline.jobs.list())
    expect(names == ["python-runner", "runner-api"], f"jobs {names}")


@step("repository: files.get/raw, commits.get/list, branches.list/get, tags.list")
def _():
    project = state["project"]
    sha = state["pipeline"].sha
    config = project.files.get(file_path=".gitlab-ci.yml", ref="main")
    expect(config.commit_id == sha and "runner-api" in config.decode().decode(), f"file {config.file_path}")
    expect(project.files.raw(file_path=".gitlab-ci.yml", ref=sha) == config.decode(), "raw file")
    commit = project.commits.get(sha)
    expect(commit.id == sha and commit.last_pipeline["id"] == state["pipeline"].id, f"commit {commit.id}")
    branches = project.branches.list(get_all=True)
    expect("main" in [b.name for b in branches], f"branches {[b.name for b in branches]}")
    main = project.branches.get("main")
    expect(main.default and main.commit["id"] == sha, f"branch main {main.commit}")
    history = [c.id for c in project.commits.list(ref_name="main", iterator=True, per_page=1)]
    expect(history and history[0] == sha, f"commits {history}")
    expect(isinstance(project.tags.list(get_all=True), list), "tags")


@step("gitlab-runner-api: register, request a job, stream its log, finish it")
def _():
    runner = ApiRunner.register(
        URL,
        REGISTRATION,
        description="gitlab-runner-api",
        tags=["runner-api"],
        run_untagged=False,
        name="gitlab-runner-api",
    )
    state["api_runner"] = runner.id
    job = runner.request_job()
    expect(job is not None, "a job")
    expect(job.name == "runner-api", f"job {job.name}")
    greeting = [v.value for v in job.variables if v.key == "GREETING"]
    expect(greeting == ["hello from a variable"], f"the project variable: {greeting}")
    job.auth()
    job.log += "streamed by gitlab-runner-api\n"
    job.log += "second chunk\n"
    job.set_success()
    state["api_job"] = job.id


@step("gitlab-python-runner: register, run a job with an artifact, finish it")
def _():
    work = os.path.join(WORK, "python-runner")
    os.makedirs(work, exist_ok=True)
    python = sys.executable
    subprocess.run(
        [python, "-m", "GitlabPyRunner", "--register", URL, "--regtoken", REGISTRATION,
         "--tag", "python-runner", "--desc", "gitlab-python-runner", "--shell", "/bin/sh"],
        cwd=work, check=True, timeout=120,
    )
    subprocess.run(
        [python, "-m", "GitlabPyRunner", "--start", "gitlab-runner.yml", "--once"],
        cwd=work, check=True, timeout=300,
    )


@step("jobs list, get, trace, artifacts, a page at a time")
def _():
    project = state["project"]
    jobs = {j.name: j for j in state["pipeline"].jobs.list()}
    api_job = project.jobs.get(jobs["runner-api"].id)
    expect(api_job.status == "success", f"runner-api job {api_job.status}")
    trace = api_job.trace().decode()
    expect("streamed by gitlab-runner-api" in trace and "second chunk" in trace, trace)
    python_job = project.jobs.get(jobs["python-runner"].id)
    expect(python_job.status == "success", f"python-runner job {python_job.status}")
    # gitlab-emulator 1.1.9 writes the script's own output to the runner's stdout, not
    # to the job log; the log has the runner's sections, the artifact the script's file.
    trace = python_job.trace().decode()
    expect("section_start:" in trace and "Job complete success=True" in trace, trace)
    archive = zipfile.ZipFile(io.BytesIO(python_job.artifacts()))
    content = archive.read("out.txt").decode().strip()
    expect(content == "hello from gitlab-python-runner", f"out.txt holds {content!r}")
    expect({j.name for j in project.jobs.list(scope=["success"])} >= {"runner-api", "python-runner"}, "scope")
    # python-gitlab pages through a list by its `Link` header.
    paged = [j.id for j in project.jobs.list(iterator=True, per_page=1)]
    expect(sorted(paged) == sorted(j.id for j in project.jobs.list(get_all=True)) and len(paged) >= 2,
           f"one job a page: {paged}")
    for _ in range(50):
        if project.pipelines.get(state["pipeline"].id).status == "success":
            break
        time.sleep(0.1)
    pipeline = project.pipelines.get(state["pipeline"].id)
    expect(pipeline.status == "success", "the pipeline succeeded")
    # One pipeline is GitLab's detail entity; a job carries its commit and pipeline.
    status = pipeline.detailed_status
    expect(status["details_path"].endswith(f"/-/pipelines/{pipeline.id}") and status["label"].startswith("passed"),
           f"detailed_status {status}")
    expect(pipeline.user["id"] == gl.user.id, f"pipeline user {pipeline.user}")
    expect(api_job.commit["id"] == pipeline.sha and api_job.pipeline["web_url"] == pipeline.web_url,
           f"job commit {api_job.commit}")


@step("runners: runners_all.list, runners.list, project runners enable/disable")
def _():
    project, other = state["project"], state["other"]
    every = gl.runners_all.list(type="instance_type")
    expect(state["api_runner"] in [r.id for r in every], "the registered runner is an instance runner")
    taken = gl.runners.get(state["api_runner"]).jobs.list(status="success", order_by="id", sort="asc")
    expect([j.name for j in taken] == ["runner-api"], f"the runner's jobs: {[j.name for j in taken]}")
    registered = gl.runners.get(state["api_runner"])
    expect(registered.name == "gitlab-runner-api", f"the name it registered with: {registered.name}")
    job = project.jobs.get(taken[0].id)
    expect(job.runner["id"] == registered.id and job.runner["name"] == "gitlab-runner-api", f"job runner {job.runner}")
    expect(job.runner_manager is not None and job.runner_manager["job_execution_status"] == "idle",
           f"job runner_manager {job.runner_manager}")
    expect(job.project == {"ci_job_token_scope_enabled": False}, f"job project {job.project}")
    mine = gl.user.runners.create({"runner_type": "project_type", "project_id": project.id,
                                   "description": "project runner", "tag_list": ["arm"]})
    owned = gl.runners.list()
    expect([r.id for r in owned] == [mine.id], f"owned {[r.id for r in owned]}")
    expect([r.id for r in gl.runners.list(type="project_type", status="never_contacted", tag_list=["arm"])] == [mine.id], "filters")
    expect(mine.id in [r.id for r in project.runners.list()], "the project's runners")
    expect(mine.id not in [r.id for r in other.runners.list()], "not the other project's")
    other.runners.create({"runner_id": mine.id})
    expect(mine.id in [r.id for r in other.runners.list()], "enabled")
    details = gl.runners.get(mine.id)
    expect([p["id"] for p in details.projects] == [project.id, other.id],
           f"the runner's projects {[p['id'] for p in details.projects]}")
    other.runners.delete(mine.id)
    expect(mine.id not in [r.id for r in other.runners.list()], "disabled")


@step("namespaces: list(search=…), get, exists, a project created in one")
def _():
    found = gl.namespaces.list(search="clients")
    expect([n.full_path for n in found] == ["clients"], f"search {[n.full_path for n in found]}")
    clients = gl.namespaces.get(found[0].id)
    expect(clients.kind == "group" and clients.parent_id is None, f"get {clients.attributes}")
    expect(gl.namespaces.get("clients").id == clients.id, "get by path")
    taken = gl.namespaces.exists("clients")
    expect(taken.exists and taken.suggests == ["clients1"], f"exists {taken.attributes}")
    expect(not gl.namespaces.exists("nobody-has-this").exists, "a free path")
    tool = gl.projects.create({"name": "tool", "namespace_id": clients.id, "import_url": REPOSITORY})
    expect(tool.path_with_namespace == "clients/tool" and tool.name == "tool"
           and tool.name_with_namespace == "clients / tool", f"created in it: {tool.attributes}")


@step("pipeline.cancel, pipeline.retry")
def _():
    project = state["project"]
    pipeline = project.pipelines.create({"ref": "main"})
    pipeline.cancel()
    expect(project.pipelines.get(pipeline.id).status == "canceled", "canceled")
    pipeline.retry()
    # GitLab's pipeline state machine: a retried canceled pipeline is `running` again.
    status = project.pipelines.get(pipeline.id).status
    expect(status == "running", f"retried: {status}")
    expect({j.status for j in pipeline.jobs.list()} == {"pending"}, "its jobs are pending again")
    pipeline.cancel()


@step("pipeline schedules and triggers: create, get, save, take_ownership, play, trigger_pipeline")
def _():
    other = state["other"]
    schedule = other.pipelineschedules.create(
        {"ref": "main", "description": "nightly", "cron": "0 1 * * *"})
    schedule.variables.create({"key": "TARGET", "value": "staging"})
    schedule = other.pipelineschedules.get(schedule.id)
    schedule.cron = "0 2 * * *"
    schedule.save()
    expect(other.pipelineschedules.get(schedule.id).cron == "0 2 * * *", "saved")
    schedule.take_ownership()
    expect(schedule.owner["username"] == "root", f"owner {schedule.owner}")
    schedule_id = schedule.id
    schedule.play()  # python-gitlab keeps the answer (`{"message": …}`) as the object's attributes
    ran = other.pipelineschedules.get(schedule_id).pipelines.list()
    expect(len(ran) == 1 and ran[0].source == "schedule", f"its pipelines {ran}")
    trigger = other.triggers.create({"description": "from the release repo"})
    fetched = other.triggers.get(trigger.id)
    fetched.description = "release repo"
    fetched.save()
    expect(other.triggers.get(trigger.id).description == "release repo", "trigger saved")
    pipeline = other.trigger_pipeline("main", trigger.token, variables={"TARGET": "prod"})
    expect(pipeline.source == "trigger", f"source {pipeline.source}")
    # GitLab's `PipelineTriggerService`: the request's variables and `TRIGGER_PAYLOAD`.
    variables = {v.key: v.value for v in other.pipelines.get(pipeline.id).variables.list()}
    expect(variables.get("TARGET") == "prod" and set(variables) == {"TARGET", "TRIGGER_PAYLOAD"},
           f"the trigger's variables {variables}")
    other.triggers.delete(trigger.id)
    expect(other.triggers.list() == [], "revoked")
    other.pipelineschedules.delete(schedule_id)


def cli(argv, env=None):
    """Runs a command line client; its stdout, or an error with its stderr."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})
    expect(done.returncode == 0, f"{argv} exited {done.returncode}: {done.stderr}{done.stdout}")
    return done.stdout


# Debian ships both command lines as `gitlab` upstream names them, renamed so they can be
# installed together: gitlab-cli's /usr/bin/python-gitlab (python-gitlab 3.12's CLI,
# Debian's own package of it) and ruby-gitlab's /usr/bin/ruby-gitlab (the `gitlab` gem).
PYTHON_GITLAB_CLI = os.environ.get("PYTHON_GITLAB_CLI", "/usr/bin/python-gitlab")
RUBY_GITLAB_CLI = os.environ.get("RUBY_GITLAB_CLI", "/usr/bin/ruby-gitlab")


@step("Debian gitlab-cli: current-user, project-pipeline list/get, project-job list/trace")
def _():
    project = state["project"]
    jobs = {j.name: j.id for j in state["pipeline"].jobs.list()}
    base = [PYTHON_GITLAB_CLI, "--server-url", URL, "--private-token", ADMIN, "-o", "json"]
    user = json.loads(cli(base + ["current-user", "get"]))
    expect(user["username"] == "root", f"current-user {user}")
    listed = json.loads(cli(base + ["project-pipeline", "list", "--project-id", str(project.id)]))
    expect(state["pipeline"].id in [p["id"] for p in listed], f"pipelines {listed}")
    one = json.loads(cli(base + ["project-pipeline", "get", "--project-id", str(project.id),
                                 "--id", str(state["pipeline"].id)]))
    expect(one["status"] == "success", f"pipeline {one}")
    listed = json.loads(cli(base + ["project-job", "list", "--project-id", str(project.id)]))
    expect(set(jobs.values()) <= {j["id"] for j in listed}, f"jobs {listed}")
    trace = cli([PYTHON_GITLAB_CLI, "--server-url", URL, "--private-token", ADMIN,
                 "project-job", "trace", "--project-id", str(project.id),
                 "--id", str(jobs["runner-api"])])
    expect("streamed by gitlab-runner-api" in trace, f"trace {trace!r}")


@step("Debian ruby-gitlab: user, version, pipelines, pipeline_jobs, job_trace")
def _():
    project = state["project"]
    env = {"GITLAB_API_ENDPOINT": f"{URL}/api/v4", "GITLAB_API_PRIVATE_TOKEN": ADMIN}
    user = json.loads(cli([RUBY_GITLAB_CLI, "user", "--json"], env))
    expect(user["result"]["username"] == "root", f"user {user}")
    version = json.loads(cli([RUBY_GITLAB_CLI, "version", "--json"], env))
    expect(version["result"]["version"], f"version {version}")
    pipelines = json.loads(cli([RUBY_GITLAB_CLI, "pipelines", str(project.id), "--json"], env))
    expect(state["pipeline"].id in [p["id"] for p in pipelines["result"]], f"pipelines {pipelines}")
    jobs = json.loads(cli([RUBY_GITLAB_CLI, "pipeline_jobs", str(project.id),
                           str(state["pipeline"].id), "--json"], env))
    ids = {j["name"]: j["id"] for j in jobs["result"]}
    expect(set(ids) == {"runner-api", "python-runner"}, f"jobs {jobs}")
    trace = cli([RUBY_GITLAB_CLI, "job_trace", str(project.id), str(ids["runner-api"])], env)
    expect("streamed by gitlab-runner-api" in trace and "second chunk" in trace, f"trace {trace!r}")


print(f"{len(PASSED)} passed, {len(FAILED)} failed", flush=True)
sys.exit(1 if FAILED else 0)

"""The grading harness's entry point, run inside the sandbox as `python3 -I trialog_launch.py WORKSPACE`.

It imports nothing from trialog (only pytest is installed where it runs). The code under test runs in this
same process, so everything here is about making what decides pass/fail unreachable or tamper-evident
(docs/grading.md has the overview, the attack table and the cost):

* isolation of start-up (as before): `-I`, the workspace LAST on sys.path, bytecode only from a private
  cache, pytest with our empty config, our rootdir, `--noconftest`, no plugin autoload, no cacheprovider;
* the process is made non-dumpable (prctl PR_SET_DUMPABLE 0) before anything else runs, so the kernel
  refuses /proc/<pid>/mem and ptrace to every process of the sandbox's user, children included;
* a PEP 578 audit hook is installed FIRST (before pytest or any workspace module is imported). It is the
  only holder of the nonce and of the report file descriptor: both live in its closure, and an audit hook
  cannot be reached from Python objects (no module, frame or attribute refers to it after `_install`
  returns; `gc.get_objects`/`get_referrers` are refused). Report lines are written BY the hook, when the
  harness's pytest plugin raises the `trialog.report` event. The hook writes a line only if every frame on
  the stack is trusted code (by identity: code objects of the framework modules loaded before collection,
  run with their own module globals) and the framework is unchanged (the integrity check below). A forged
  call of the plugin or of `sys.audit("trialog.report", ...)` from workspace code therefore writes a tamper
  signal, never a pass;
* the hook refuses (raises in the caller) and records as a tamper signal, when the first non-stdlib caller
  is not framework code: frame walks (`sys._getframe`, `sys._current_frames`, `tb_frame`, `gi_frame`,
  `cr_frame`, `ag_frame`), `sys.settrace`/`setprofile`, `gc.get_objects/get_referrers/get_referents`,
  `object.__setattr__`/`__delattr__` events (a function's `__code__`), opening /proc/<pid or self>/...,
  compiling code that claims a framework or stdlib file name; always: `sys.addaudithook`, every `ctypes.*`
  event, importing ctypes, loading an extension module from outside the interpreter's own folders. Honest
  stdlib uses (namedtuple, typing, enum, logging, `traceback.format_exc`) pass because the stdlib function
  the untrusted code called is not one that hands frames back (`inspect.stack`, `currentframe`,
  `traceback.walk_stack/walk_tb`, ...);
* framework integrity: when collection starts (before any test module or workspace module is imported) the
  hook snapshots, by identity, every attribute of every module loaded so far (pytest, _pytest.*, pluggy,
  iniconfig, the stdlib modules already imported, builtins, this harness) and every entry of their
  classes' `__dict__`, the plugin manager's hook implementations, and after collection each item's test
  function. It re-checks before each report line and before the completion marker; any difference is a
  tamper signal with its evidence ("_pytest.python.Function.runtest replaced");
* the frozen test modules: the hook trusts a module only when it sees pytest's loader (or the import system)
  `exec` a frozen file's code into it, with nothing but framework code (and test modules trusted before) on
  the stack, into the fresh module sys.modules holds, whose namespace holds only the import system's names
  and the real builtins. At the end of collection every collected test must come from such a module and be
  its function (code nested in the file's, the module's globals, the real builtins), and every function the
  module made must have the real builtins; at each report the modules are still what sys.modules holds.
  Copies planted in sys.modules, modules prepared by a `sys.meta_path` finder of the workspace's, builtins
  swapped while a test module imports: each a tamper signal. Bytecode caches are looked for in a folder
  nobody can make (under the root-owned inputs), so no planted bytecode is ever run;
* events raised while the hook is at work by code that is not the framework's (a hostile `__eq__` of a
  dict key that a look-up of the hook's compared) are refused, and the hook's own look-ups into namespaces
  and sys.modules compare no key they did not check is an exact str;
* `TRIALOG-DONE <nonce> <exit>` is written only after pytest returned and the final check ran: a run
  without it (os._exit, a hang killed at the timeout, a KeyboardInterrupt) is incomplete, and the
  verifier counts every test it did not see pass as failed.

Output lines (on a duplicate of the original stdout, each after a newline):
    TRIALOG-REPORT <nonce> <when> <outcome> <node id, unicode_escape'd>
    TRIALOG-ITEM <nonce> <node id>               (collect mode: the trusted collection of repo/)
    TRIALOG-SIGNAL <nonce> <evidence>
    TRIALOG-DONE <nonce> <exit code>

What remains possible, and why (CPython cannot isolate code sharing one interpreter):
* frames reached without an audit event: a frame pytest itself hands out (e.g. a `pytest.ExceptionInfo`'s
  traceback entries), then `f_back`/`f_locals`, which raise no event in 3.11. They expose the harness's
  objects, not the nonce (which is in no frame); changes made through them to guarded objects are caught
  by the integrity check, changes to unguarded state (a new meta_path finder, a stdlib module first
  imported after collection began, an instance attribute of some pytest object we do not snapshot) are not;
* function `__closure__`/`__globals__`/cell contents raise no event: any closure reachable from a Python
  object is readable; that is why the secret is held by the hook only;
* a stdlib wrapper we did not list as frame-returning (the list is in `_LEAKY`); code with a forged
  framework file name made through a stdlib function (`codeop`, importlib's `_call_with_frames_removed`,
  `marshal`; only a direct `compile` of source or `CodeType` call by untrusted code is refused: compiling
  an AST raises no event in 3.11), which would then pass
  the file-name test of the refusals (never the identity test of the report path); a native extension
  built and loaded from an allowed folder;
* names of a trusted test module rebound after its import and before its tests run (a thread of the
  workspace's): a test function replaced by another of the same file, a module-level helper or `pytest`
  replaced; a stdlib or framework decorator's own behaviour around a frozen test;
* anything the test itself trusts: a workspace that returns values which satisfy the assertions is, to
  this harness, a solution (the always-true `__eq__` is handled by `trialog_guard`, see there).
"""

from __future__ import annotations

import os
import sys
from typing import Any

HARNESS = os.path.dirname(os.path.abspath(__file__))
# Where bytecode caches are looked for (and, with dont_write_bytecode, never written): a folder nobody can
# make, in the harness's root-owned read-only inputs. A __pycache__ planted in the workspace is never read,
# and neither is bytecode planted by the code under test for a module imported after it ran (pytest's loader
# would run a planted rewrite of a later test module as the frozen file's code; a stdlib module's would run
# under a stdlib file name).
PYCACHE = os.path.join(HARNESS, ".no-pycache")
# Except for the interpreter's own modules: the sandbox image compiles the stdlib and pytest as root into
# this prefix at build time (the agent cannot write under it, so no planted bytecode is there). Used only
# where it is root's and not writable by this process; elsewhere (a host run) everything compiles from source.
TRUSTED_PYCACHE = "/usr/lib/trialog-pycache"


def _pycache_prefix() -> str:
    try:
        owner = os.stat(TRUSTED_PYCACHE).st_uid
    except OSError:
        return PYCACHE
    if owner != 0 or os.getuid() == 0 or os.access(TRUSTED_PYCACHE, os.W_OK):
        return PYCACHE
    return TRUSTED_PYCACHE


# stdlib functions that return frames (or tracebacks' frames) to their caller: called by untrusted code,
# the frame access inside them is refused. Others (namedtuple, typing, logging, format_exc) keep theirs.
_LEAKY = frozenset(
    {
        "currentframe", "stack", "trace", "getouterframes", "getinnerframes", "walk_stack", "walk_tb",
        "_getframe", "getframeinfo", "<lambda>", "__next__", "_current_frames",
    }
)  # fmt: skip
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "tb_next"})
_GUARDED_EVENTS = frozenset(
    {
        "sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "gc.get_objects",
        "gc.get_referrers", "gc.get_referents", "object.__getattr__", "object.__setattr__",
        "object.__delattr__", "open", "compile", "code.__new__", "import", "sys.addaudithook",
        "os.chdir", "trialog.report", "trialog.item", "trialog.snapshot", "trialog.collected",
        "trialog.tamper", "trialog.final", "trialog.done", "exec",
    }
)  # fmt: skip
# What the import system puts in a new module's namespace before its code runs (with `__builtins__`, which
# `exec` adds); a frozen test module whose namespace holds more was prepared by someone else.
_MODULE_ATTRS = frozenset(
    {
        "__name__", "__doc__", "__package__", "__loader__", "__spec__", "__path__", "__file__", "__cached__",
        "__builtins__",
    }
)  # fmt: skip
# Module attributes that the framework itself rebinds while tests run (catch_warnings, capture, logging).
_VOLATILE = frozenset(
    {
        ("warnings", "filters"), ("warnings", "showwarning"), ("warnings", "_showwarnmsg_impl"),
        ("warnings", "_filters_mutated"), ("warnings", "_onceregistry"), ("warnings", "defaultaction"),
        ("logging", "root"), ("logging", "_lock"), ("_pytest.assertion.util", "_reprcompare"),
        ("_pytest.assertion.util", "_assertion_pass"), ("_pytest.assertion.util", "_config"),
    }
)  # fmt: skip


def _make_dumpless() -> None:
    # Before the hook: ctypes is refused afterwards. The modules are then dropped, so `import ctypes`
    # by the code under test goes through the import machinery (and its refused event) again.
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (ImportError, OSError, AttributeError):
        pass
    for name in [m for m in sys.modules if m in ("ctypes", "_ctypes") or m.startswith("ctypes.")]:
        del sys.modules[name]


def _install(workspace: str, tests_dir: str, callers: dict[str, tuple[Any, ...]]) -> None:
    """Install the audit hook; it alone keeps the nonce and the report descriptor (see the module doc)."""
    import importlib.util
    import itertools
    import operator
    import sysconfig
    import threading
    import types

    nonce = sys.stdin.readline().strip()
    fd = os.dup(1)
    write, getframe, getpid, getcwd = os.write, sys._getframe, os.getpid, os.getcwd
    realpath, join, get_ident = os.path.realpath, os.path.join, threading.get_ident
    function_type, code_type, module_type, type_type, method_type, member_type = (
        types.FunctionType, types.CodeType, types.ModuleType, type, types.MethodType,
        types.MemberDescriptorType,
    )  # fmt: skip
    normpath = os.path.normpath
    real_builtins = sys.modules["builtins"]
    builtins_dict = real_builtins.__dict__
    class_dict = type.__dict__["__dict__"].__get__  # a class's namespace without asking the class
    builtins_of: Any = types.FunctionType.__dict__["__builtins__"].__get__  # what a function calls builtins
    str_type, int_type, tuple_type, frozen = str, int, tuple, frozenset
    # Bound now, before any untrusted code runs: the integrity check must not call builtins it checks.
    all_, map_, is_, repeat = all, map, operator.is_, itertools.repeat
    mappingproxy_type = types.MappingProxyType
    pid = str(getpid())
    main_thread = get_ident()
    reported: set[tuple[str, str]] = set()
    modules = sys.modules

    def _dir(origin: str | None) -> str:
        return os.path.dirname(origin) + os.sep if origin else "\0"

    stdlib = tuple({sysconfig.get_paths()["stdlib"] + os.sep, sysconfig.get_paths()["platstdlib"] + os.sep})
    framework = (
        *(
            _dir(spec.origin if spec else None)
            for spec in (importlib.util.find_spec(m) for m in ("pytest", "_pytest", "pluggy", "iniconfig"))
        ),
        join(HARNESS, "trialog_launch.py"),
        join(HARNESS, "trialog_guard.py"),
    )
    interpreter_dirs = (*stdlib, *framework, sys.base_prefix + os.sep, sys.prefix + os.sep)
    busy: set[int] = set()
    asking: set[int] = set()
    signals: list[str] = []
    state: dict[str, Any] = {}  # baseline; only the hook and its helpers see this dict
    trusted_codes: set[int] = set()
    trusted_globals: set[int] = set()
    # The frozen test modules as pytest's loader ran them: their code (nested code included), namespaces
    # and module objects, recorded at the `exec` of the frozen file's code (see `test_module_executed`).
    test_codes: dict[int, int] = {}  # id(code) -> id(the namespace of the module whose file it is in)
    test_modules: dict[int, tuple[str, Any]] = {}
    keep: list[object] = []  # keeps the objects whose ids are in the sets above alive

    def emit(kind: str, text: str) -> None:
        safe = text.encode("unicode_escape").replace(b"\n", b"\\n")
        write(fd, b"\n" + kind.encode() + b" " + nonce.encode() + b" " + safe + b"\n")

    def signal(evidence: str) -> None:
        if evidence not in signals:
            signals.append(evidence)
            emit("TRIALOG-SIGNAL", evidence)

    def is_stdlib(filename: str) -> bool:
        return filename.startswith(stdlib) or filename.startswith("<frozen ")

    def untrusted_caller() -> tuple[bool, str]:
        """(refuse?, where): the first non-stdlib frame above the event decides (see `_LEAKY`)."""
        frame: Any = getframe(3)  # 0 this, 1 guarded, 2 hook, 3 the code that raised the event
        adjacent = ""
        while frame is not None and is_stdlib(frame.f_code.co_filename):
            adjacent = frame.f_code.co_name
            frame = frame.f_back
        if frame is None:
            return False, ""
        filename = frame.f_code.co_filename
        if filename.startswith(framework):
            return False, ""
        where = f"{filename}:{frame.f_lineno}"
        return (adjacent == "" or adjacent in _LEAKY), where

    def refuse(evidence: str) -> None:
        signal(evidence)
        raise RuntimeError(f"trialog harness: refused {evidence}")

    def stack_is_trusted() -> str:
        """'' when every frame below the event is trusted code run with its module's globals."""
        frame: Any = getframe(2)
        while frame is not None:
            code = frame.f_code
            if id(code) not in trusted_codes or id(frame.f_globals) not in trusted_globals:
                return f"untrusted frame {code.co_name} at {code.co_filename}:{frame.f_lineno}"
            frame = frame.f_back
        return ""

    def add_codes(code: Any) -> None:
        if type(code) is code_type and id(code) not in trusted_codes:
            trusted_codes.add(id(code))
            keep.append(code)
            for const in code.co_consts:
                add_codes(const)

    def add_test_codes(code: Any, home: int) -> None:
        if type(code) is code_type and id(code) not in test_codes:
            test_codes[id(code)] = home
            keep.append(code)
            for const in code.co_consts:
                add_test_codes(const, home)

    def lookup(mapping: Any, key: str, default: object = None) -> Any:
        """mapping[key] without hashing or comparing the mapping's other keys: a key the code under test put
        there with a colliding hash would have its __eq__ run inside the hook (whose events go unchecked)."""
        for name, value in list(mapping.items()):
            if type(name) is str_type and name == key:
                return value
        return default

    def modules_named(names: frozenset[str]) -> dict[str, object]:
        """The sys.modules entries of `names`, read the same careful way as `lookup`."""
        return {k: v for k, v in list(modules.items()) if type(k) is str_type and k in names}

    def frame_problem(frame: Any) -> str:
        """'' when this frame and every one below it run framework code or frozen test code, each with its
        own module's globals: nothing of the code under test can be half-way through what they do."""
        while frame is not None:
            code, where = frame.f_code, id(frame.f_globals)
            framework_code = id(code) in trusted_codes and where in trusted_globals
            if not framework_code and test_codes.get(id(code)) != where:
                return f"{code.co_name} at {code.co_filename}:{frame.f_lineno}"
            frame = frame.f_back
        return ""

    def test_module_executed(code: Any) -> None:
        """`exec` of code claiming a frozen test file: trusted when pytest's loader (or the import system)
        runs it, with nothing untrusted on the stack, into the fresh module that sys.modules holds under
        its name, with the real builtins. Its code, namespace and module are then what collected tests
        must come from (`check_collected`). Nothing here touches an object that could run Python code of
        the workspace's (a hostile `__str__`, `__hash__`, `__class__`): it would run inside the hook."""
        if type(code) is not code_type or "entries" not in state:
            return
        filename = code.co_filename
        if type(filename) is not str_type or not filename.startswith(tests_dir):
            return
        caller: Any = getframe(3)  # 0 this, 1 guarded, 2 hook, 3 the code calling exec
        if frame_problem(caller):
            return  # not trusted: if pytest collects what it makes, check_collected says so
        module, frame, wanted = None, caller, normpath(filename)
        for _ in range(4):  # the loader's exec_module(module), or the import system's _load_unlocked
            if frame is None:
                break
            found = frame.f_locals.get("module")
            origin = lookup(found.__dict__, "__file__") if type(found) is module_type else None
            if type(origin) is str_type and normpath(origin) == wanted:
                module = found
                break
            frame = frame.f_back
        if module is None:
            return
        namespace = module.__dict__
        name = lookup(namespace, "__name__")
        extra = [key for key in namespace if type(key) is not str_type or key not in _MODULE_ATTRS]
        given = lookup(namespace, "__builtins__", builtins_dict)
        if extra or (given is not builtins_dict and given is not real_builtins):
            what = f"{len(extra)} names of its own" if extra else "builtins of its own"
            signal(f"the frozen test module {filename} was prepared with {what} before its code ran")
            return
        if type(name) is not str_type or modules_named(frozen((name,))).get(name) is not module:
            return
        add_test_codes(code, id(namespace))
        test_modules[id(module)] = (name, module)

    def test_function_problem(value: Any) -> str:
        """'' when `value` (a collected test's function) is one a frozen file defined: its code nested in
        the file's, run with that module's namespace and the real builtins. Decorators are followed through
        `__wrapped__` when the wrapper is the file's own or the framework's / standard library's and
        closes over what it says it wraps (functools.wraps, mock.patch)."""
        for _ in range(16):
            if type(value) is method_type:
                value = value.__func__
                continue
            if type(value) is not function_type:
                return "not a function"
            code = value.__code__
            if builtins_of(value) is not builtins_dict:
                return f"{code.co_name} runs with builtins of its own"
            wrapped = lookup(value.__dict__, "__wrapped__")
            if id(code) in test_codes:
                if id(value.__globals__) != test_codes[id(code)]:
                    return f"{code.co_name} runs with other globals than its module's"
                if wrapped is None:
                    return ""
            elif wrapped is None or not (
                is_stdlib(code.co_filename) or code.co_filename.startswith(framework)
            ):
                return f"its code {code.co_name} at {code.co_filename} is not the frozen file's"
            if not any(cell_holds(cell, wrapped) for cell in value.__closure__ or ()):
                return f"{code.co_name} claims to wrap what it does not call"
            value = wrapped
        return "a chain of wrappers too long to follow"

    def cell_holds(cell: Any, value: object) -> bool:
        try:
            return cell.cell_contents is value
        except ValueError:  # an empty cell
            return False

    def namespace_problem(namespace: dict[str, Any], name: str) -> str:
        """'' when a frozen test module's namespace, and the functions it defined (its classes' too), use
        the real builtins: functions take their builtins from their module's namespace when they are made,
        so builtins swapped there while the module was importing live on in them."""
        given = lookup(namespace, "__builtins__")
        if given is not builtins_dict and given is not real_builtins:
            return "its __builtins__ replaced"
        values = list(namespace.values())
        for value in list(values):
            if issubclass(type(value), type_type):  # no isinstance: it would ask the value for __class__
                members = class_dict(value)
                owner = lookup(members, "__module__")
                if type(owner) is str_type and owner == name:
                    values.extend(members.values())
        for value in values:
            if type(value) in (staticmethod, classmethod):
                value = value.__func__
            for _ in range(16):
                if type(value) is not function_type:
                    break
                if value.__globals__ is namespace and builtins_of(value) is not builtins_dict:
                    return f"{value.__code__.co_name} defined with builtins of its own"
                value = lookup(value.__dict__, "__wrapped__")
        return ""

    def add_function(value: Any) -> None:
        # No getattr on arbitrary objects: a module attribute may answer any name (pytest.mark does).
        kind = type(value)
        if kind in (staticmethod, classmethod):
            value = value.__func__
        elif kind is property:
            value = value.fget
        if type(value) is function_type:
            add_codes(value.__code__)

    def take_snapshot() -> None:
        entries: list[tuple[str, object, str, object]] = []  # (where, mapping, key, value)
        classes: list[tuple[str, type, Any, frozenset[str]]] = []
        seen_classes: set[int] = set()
        frame: Any = getframe(0)
        while frame is not None:  # the launcher's own module-level code and main()
            add_codes(frame.f_code)
            frame = frame.f_back
        for mod_name, module in list(sys.modules.items()):
            if type(module) is not module_type:
                continue
            namespace = module.__dict__
            trusted_globals.add(id(namespace))
            keep.append(module)
            if mod_name == "sys":
                continue  # rebinds stdout/modules legitimately; its lists are checked below
            origin = namespace.get("__file__")
            # The framework's data too; of the stdlib, the behaviour (functions, classes, descriptors):
            # its data attributes change as honest code uses it (weakref.finalize._dirty, logging flags).
            strict = mod_name in ("builtins", "__main__") or (
                type(origin) is str_type and origin.startswith(framework)
            )
            for key, value in list(namespace.items()):
                if (mod_name, key) in _VOLATILE or not (strict or behaviour(value)):
                    continue
                entries.append((mod_name, namespace, key, value))
                add_function(value)
                if isinstance(value, type_type) and id(value) not in seen_classes:
                    seen_classes.add(id(value))
                    proxy = value.__dict__
                    where = f"{value.__module__}.{value.__qualname__}"
                    classes.append((where, value, proxy, frozen(proxy)))
                    for attr, member in list(proxy.items()):
                        if strict or behaviour(member):
                            entries.append((where, proxy, attr, member))
                        add_function(member)
        state["guard"] = modules.get("trialog_guard")
        state["entries"] = entries
        state["groups"] = group_entries(entries)
        state["classes"] = classes
        state["lists"] = [(name, lst, tuple_type(lst)) for name, lst in
                          (("sys.meta_path", sys.meta_path), ("sys.path_hooks", sys.path_hooks))]  # fmt: skip

    def snapshot_plugins(pluginmanager: object) -> None:
        hooks = pluginmanager.hook.__dict__  # type: ignore[attr-defined]
        # get_hookimpls: the public accessor (pluggy 1.0 keeps wrappers and the others in two lists).
        state["hookimpls"] = [
            (name, caller.get_hookimpls, tuple_type(caller.get_hookimpls()))
            for name, caller in list(hooks.items())
            if hasattr(caller, "get_hookimpls")
        ]

    def snapshot_items(session: object) -> None:
        items: dict[str, tuple[object, object, object, frozenset[str], object]] = {}
        parent_of = node_slot("parent")
        for item in session.items:  # type: ignore[attr-defined]
            nodeid = item.nodeid
            if type(nodeid) is str_type:
                parent = parent_of(item)
                owner = None if parent is None else parent.__dict__.get("_obj")  # unittest's test class
                items[nodeid] = (item, type(item), item.__dict__.get("_obj"), frozen(item.__dict__), owner)
        state["items"] = items
        # The frozen test modules as the loader ran them (not whatever sys.modules holds under a test file's
        # name now: asking those objects for __file__ could run the workspace's code inside the hook).
        state["test_modules"] = [(name, module.__dict__) for name, module in list(test_modules.values())]

    def node_slot(name: str) -> Any:
        """A reader of pytest nodes' slot `name` (Node has __slots__) that runs no Python code."""
        node_class = getattr(modules.get("_pytest.nodes"), "Node", None)
        slot = class_dict(node_class).get(name) if issubclass(type(node_class), type_type) else None
        if type(slot) is member_type:
            return slot.__get__
        return lambda node: node.__dict__.get(name)

    def check_collected(session: Any) -> None:
        """Every collected test comes from a module the harness saw pytest's loader run a frozen file's
        code in (`test_module_executed`) and is a function of it; those modules use the real builtins.
        A module planted in sys.modules, or made with other builtins, fails here."""
        module_class = getattr(modules.get("_pytest.python"), "Module", None)
        parent_of = node_slot("parent")
        scanned: dict[int, str] = {}  # id(module) -> namespace_problem, once per module
        for item in list(session.items):
            fields = item.__dict__
            node = parent_of(item)
            for _ in range(64):  # up to the item's Module node (through its classes)
                if node is None or (module_class is not None and issubclass(type(node), module_class)):
                    break
                node = parent_of(node)
            if node is None:
                continue  # not from a Python test module (a doctest text file, say)
            nodeid = item.nodeid  # a property of pytest's own (as in snapshot_items)
            nodeid = nodeid if type(nodeid) is str_type else "?"
            module = node.__dict__.get("_obj")
            trusted = test_modules.get(id(module))
            if trusted is None or trusted[1] is not module:
                signal(f"test item {nodeid} is not from the module pytest's loader ran the frozen file in")
                continue
            name, module = trusted
            if id(module) not in scanned:
                scanned[id(module)] = namespace_problem(module.__dict__, name)
            problem = scanned[id(module)]
            if problem:
                signal(f"the frozen test module {name}: {problem}")
                continue
            function = fields.get("_obj")
            if function is not None:
                problem = test_function_problem(function)
                if problem:
                    signal(f"test item {nodeid} is not the frozen file's test: {problem}")

    def group_entries(entries: list[tuple[str, Any, str, object]]) -> list[tuple[Any, tuple[Any, ...]]]:
        """The snapshot's entries as flat tuples per kind of namespace (module dicts, class proxies), so that
        `check` compares all of them in one C loop (`map` of the type's own `get`, `is_`): a check runs before
        every report line, and entry by entry in Python it was most of a grade's time. Entries are walked one
        by one only where something differs, or for a namespace of any other type (whose `get` could be
        Python code)."""
        fast = (dict, mappingproxy_type)
        grouped: dict[Any, tuple[list[Any], list[str], list[object], list[tuple[str, Any, str, object]]]] = {}
        for entry in entries:
            _, mapping, key, value = entry
            kind = type(mapping)
            group = grouped.setdefault(kind if kind in fast else None, ([], [], [], []))
            group[0].append(mapping)
            group[1].append(key)
            group[2].append(value)
            group[3].append(entry)
        return [
            (None if kind is None else kind.get, tuple_type(tuple_type(column) for column in columns))
            for kind, columns in grouped.items()
        ]

    def check(nodeid: str | None) -> None:
        for get, (maps, keys, values, rows) in state.get("groups", ()):
            if get is not None and all_(map_(is_, map_(get, maps, keys, repeat(state)), values)):
                continue
            for where, mapping, key, value in rows:
                if mapping.get(key, state) is not value:
                    signal(f"{where}.{key} replaced")
        for where, cls, proxy, keys in state.get("classes", ()):
            if len(proxy) != len(keys):
                for key in [k for k in proxy if k not in keys]:
                    if any(overridable(vars(base).get(key)) for base in cls.__mro__[1:]):
                        signal(f"{where}.{key} added, overriding a base class's")
        for where, lst, items in state.get("lists", ()):
            if any(not any(x is y for y in lst) for x in items):
                signal(f"{where} entry removed")
        for name, get_hookimpls, impls in state.get("hookimpls", ()):
            now = get_hookimpls()
            if len(now) != len(impls) or any(a is not b for a, b in zip(now, impls, strict=False)):
                signal(f"pytest hook {name} implementations changed")
        trusted = list(test_modules.values())
        now = modules_named(frozen(["trialog_guard", *(name for name, _ in trusted)]))
        if now.get("trialog_guard") is not state.get("guard"):
            signal("sys.modules['trialog_guard'] replaced")
        for name, namespace in state.get("test_modules", ()):
            if lookup(namespace, "__import__", state) is not state:
                signal(f"{name}.__import__ shadows the builtin the rewritten asserts use")
            given = lookup(namespace, "__builtins__")
            if given is not builtins_dict and given is not real_builtins:
                signal(f"{name}.__builtins__ replaced")
        for name, module in trusted:
            if now.get(name, module) is not module:  # absent: its import failed (a collection error)
                signal(f"sys.modules[{name!r}] replaced")
        if nodeid is not None:
            saved = state.get("items", {}).get(nodeid)
            if saved is not None:
                item, cls, obj, keys, owner = saved
                if type(item) is not cls or not same_test(item.__dict__.get("_obj"), obj, owner):
                    signal(f"test item {nodeid} changed its test function or class")
                shadow = [
                    k
                    for k in item.__dict__
                    if k not in keys and any(overridable(vars(c).get(k)) for c in cls.__mro__)
                ]
                if shadow:
                    signal(f"test item {nodeid} attribute {shadow[0]} overridden")

    def same_test(now: Any, collected: Any, owner: object) -> bool:
        """The item's function as collected; or, as unittest items rebind it (at setup a bound method of a
        fresh instance of the test class, None after teardown), the same function bound to one."""
        if now is collected or now is None:
            return True
        if type(now) is not method_type:
            return False
        if type(collected) is method_type:
            return now.__func__ is collected.__func__ and type(now.__self__) is type(collected.__self__)
        return now.__func__ is collected and type(now.__self__) is owner

    def behaviour(value: object) -> bool:
        return callable(value) or type(value) in (staticmethod, classmethod, property, module_type)

    def overridable(member: object) -> bool:
        """A class member an instance (or subclass) attribute of the same name would replace."""
        return type(member) in (function_type, staticmethod, classmethod)

    def own_event(event: str, args: tuple[object, ...]) -> None:
        if event == "trialog.tamper":
            signal(str_type(args[0]) if type(args[0]) is str_type else "tamper event")
            return
        problem = stack_is_trusted() if state.get("entries") is not None else ""
        # Only from the harness's own call site, on the main thread: a trusted function (sys.audit itself,
        # the plugin's method, a hook caller) run as a thread target, finalizer or atexit callback would
        # otherwise bring a trusted-looking stack.
        caller: Any = getframe(3)
        if get_ident() != main_thread:
            problem = f"another thread ({caller.f_code.co_name})"
        elif caller.f_code not in callers.get(event, ()):
            problem = problem or f"an unexpected caller {caller.f_code.co_name}"
        elif event == "trialog.report" and caller.f_back.f_code.co_name != "_multicall":
            problem = problem or f"a report not delivered by pluggy ({caller.f_back.f_code.co_name})"
        if event == "trialog.snapshot" and "entries" not in state:
            take_snapshot()
            snapshot_plugins(args[0])
            return
        if problem:
            signal(f"{event} from {problem}")
            return
        if event == "trialog.collected":
            snapshot_items(args[0])
            check_collected(args[0])
        elif event == "trialog.item" and type(args[0]) is str_type:
            emit("TRIALOG-ITEM", args[0])
        elif event == "trialog.report" and all(type(a) is str_type for a in args):
            nodeid, when, outcome = args
            if (nodeid, when) in reported:  # a forged report beside (or before) the real one
                signal(f"a second {when} report for {nodeid}")
                return
            reported.add((nodeid, when))  # type: ignore[arg-type]
            check(nodeid)  # type: ignore[arg-type]
            emit("TRIALOG-REPORT", f"{when} {outcome} {nodeid}")
        elif event == "trialog.final":
            check(None)  # the session is over; plugins' clean-up (unconfigure) restores what they patched
            state["final"] = True
        elif event == "trialog.done" and type(args[0]) is int_type and state.get("final"):
            emit("TRIALOG-DONE", str_type(args[0]))

    def guarded(event: str, args: tuple[object, ...]) -> None:
        if event.startswith("trialog."):
            own_event(event, args)
            return
        if event == "sys.addaudithook":
            refuse("sys.addaudithook")
        if event == "exec":
            test_module_executed(args[0])
            return
        if event == "import":
            name, filename = args[0], args[1] if len(args) > 1 else None
            if name in ("ctypes", "_ctypes") or (type(name) is str_type and name.startswith("ctypes.")):
                refuse(f"import {name}")
            if (
                type(filename) is str_type
                and str(filename).endswith((".so", ".pyd"))
                and not realpath(str(filename)).startswith(interpreter_dirs)
            ):
                refuse(f"loading the extension module {filename}")
            return
        if event == "object.__getattr__" and args[1] not in _FRAME_ATTRS:
            return
        if event in ("open", "os.chdir"):
            path = args[0]
            if type(path) is bytes:
                path = path.decode("utf-8", "replace")
            if type(path) is not str_type:
                return
            if path.startswith(interpreter_dirs) or path.startswith(PYCACHE):
                return  # the interpreter's own files (root-owned folders: no link planted there)
            resolved = realpath(join(getcwd(), path))
            parts = resolved.split("/")
            if not (len(parts) > 2 and parts[1] == "proc" and (parts[2] in ("self", "thread-self", pid)
                                                               or parts[-1] == "mem")):  # fmt: skip
                return
            refused, where = untrusted_caller()
            if refused or where:
                refuse(f"{event} {resolved} at {where}")
            return
        if event in ("compile", "code.__new__"):
            filename = args[1]  # compile(source, filename), code.__new__(code, filename, ...)
            if type(filename) is bytes:
                filename = filename.decode("utf-8", "replace")
            if type(filename) is not str_type or not filename.startswith((*stdlib, *framework, tests_dir)):
                return
            caller: Any = getframe(2)  # 0 guarded, 1 hook, 2 the code compiling
            if is_stdlib(caller.f_code.co_filename) or caller.f_code.co_filename.startswith(framework):
                return  # the import system compiling a source file, asyncio's code.replace, ...
            refuse(f"{event} claiming {filename} at {caller.f_code.co_filename}:{caller.f_lineno}")
            return
        refused, where = untrusted_caller()
        if refused:
            detail = f" {args[1]}" if event.startswith("object.") and type(args[1]) is str_type else ""
            refuse(f"{event}{detail} at {where}")

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event not in _GUARDED_EVENTS:
            if event.startswith("ctypes."):
                refuse(event)
            return
        me = get_ident()
        if me in busy:
            # Raised while the hook is at work: by the hook itself (its own frame walk) or the framework code
            # it calls, let through; by code of anyone else that a check made run (a hostile __eq__ or
            # __hash__ of a key in a namespace the hook looks into), refused: nothing else is guarded then.
            if me in asking:
                return  # the frame look-up just below
            asking.add(me)
            try:
                raiser = getframe(1).f_code
            finally:
                asking.discard(me)
            if trusted_codes and id(raiser) not in trusted_codes:
                refuse(f"{event} inside the harness's checks, from {raiser.co_filename}")
            return
        busy.add(me)
        try:
            guarded(event, args)
        finally:
            busy.discard(me)

    sys.addaudithook(hook)


class _Reporter:
    """The harness's pytest plugin: it raises the audit events the hook turns into report lines.

    It holds no secret and writes nothing itself: calling it from workspace code only makes the hook see
    an untrusted frame on the stack.
    """

    def __init__(self, collect_only: bool) -> None:
        self._collect_only = collect_only

    @staticmethod
    def pytest_collection(session: object, _audit: object = sys.audit) -> None:
        # Marked tryfirst in main(): after every plugin configured, before any test module (or workspace
        # module) is imported.
        _audit("trialog.snapshot", session.config.pluginmanager)  # type: ignore[attr-defined, operator]

    def pytest_collection_finish(self, session: object, _audit: object = sys.audit) -> None:
        _audit("trialog.collected", session)  # type: ignore[operator]
        if self._collect_only:
            for item in session.items:  # type: ignore[attr-defined]
                _audit("trialog.item", str(item.nodeid))  # type: ignore[operator]

    @staticmethod
    def pytest_sessionfinish(session: object, _audit: object = sys.audit) -> None:
        # Marked trylast in main(): every report is written; unconfigure has not restored anything yet.
        _audit("trialog.final")  # type: ignore[operator]

    @staticmethod
    def pytest_runtest_logreport(report: object, _audit: object = sys.audit) -> None:
        # An xfail is reported as skipped, an xpass as passed with `wasxfail`: neither is a real pass.
        outcome = "skipped" if hasattr(report, "wasxfail") else str(getattr(report, "outcome", ""))
        nodeid, when = str(getattr(report, "nodeid", "")), str(getattr(report, "when", ""))
        _audit("trialog.report", nodeid, when, outcome)  # type: ignore[operator]

    @staticmethod
    def pytest_collectreport(report: object, _audit: object = sys.audit) -> None:
        if getattr(report, "outcome", "") != "passed":
            nodeid, outcome = str(getattr(report, "nodeid", "")), str(getattr(report, "outcome", ""))
            _audit("trialog.report", nodeid, "collect", outcome)  # type: ignore[operator]


def main() -> int:
    collect_only = sys.argv[1] == "--collect"
    workspace = sys.argv[-1]
    _make_dumpless()
    sys.dont_write_bytecode = True
    sys.path = [HARNESS, *(p for p in sys.path if p and p != workspace), workspace]
    callers = {
        "trialog.snapshot": (_Reporter.pytest_collection.__code__,),
        "trialog.collected": (_Reporter.pytest_collection_finish.__code__,),
        "trialog.item": (_Reporter.pytest_collection_finish.__code__,),
        "trialog.report": (
            _Reporter.pytest_runtest_logreport.__code__,
            _Reporter.pytest_collectreport.__code__,
        ),
        "trialog.final": (_Reporter.pytest_sessionfinish.__code__,),
        "trialog.done": (main.__code__,),
    }
    _install(workspace, os.path.join(HARNESS, "tests") + os.sep, callers)
    sys.pycache_prefix = _pycache_prefix()
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.chdir(workspace)
    # Imported by test modules (see trialog_guard); loaded now so that it is in the framework snapshot.
    import pytest  # only now: the path is ours, and the hook is in place
    import trialog_guard  # type: ignore[import-not-found]  # noqa: F401

    args = [
        "-q", "-p", "no:cacheprovider", "--noconftest", "--continue-on-collection-errors",
        "--rootdir", HARNESS, "-c", os.path.join(HARNESS, "pytest.ini"),
        "--confcutdir", HARNESS, os.path.join(HARNESS, "tests"),
    ]  # fmt: skip
    if collect_only:
        args.insert(0, "--collect-only")
    pytest.hookimpl(tryfirst=True)(_Reporter.pytest_collection)
    pytest.hookimpl(trylast=True)(_Reporter.pytest_sessionfinish)
    code = int(pytest.main(args, plugins=[_Reporter(collect_only)]))
    sys.audit("trialog.done", code)
    return code


if __name__ == "__main__":
    sys.exit(main())

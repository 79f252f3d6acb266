// A kept launch's usual case in C: the launch path's checks, the program's frame, the slab's
// bytes and the launch itself in one call, so that a kept launch costs about what a plain one
// does. Everything it does not handle (a build's first launches, a clock bracket due, a slab to
// open or ship, an autotuner, a capture, --measure-overhead, tool work, the total reached) it
// leaves to the Python launch path by answering NOT_TAKEN before it changes anything; the
// Python path (collect/launch_path.py and collect/slabs.py) is the reference for each step.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>
#include <stddef.h>
#include <time.h>

#if PY_VERSION_HEX < 0x030D0000
#define PyObject_GetOptionalAttr _PyObject_LookupAttr
#endif

// The exception being raised, held while other calls run (PyErr_Fetch is deprecated from 3.12,
// and a compiler warning would reach the program's stderr when this file is built).
#if PY_VERSION_HEX >= 0x030C0000
typedef PyObject *held_error;
static held_error hold_error(void) { return PyErr_GetRaisedException(); }
static void restore_error(held_error e) {
  PyErr_Clear();
  PyErr_SetRaisedException(e);
}
#else
typedef struct { PyObject *type, *value, *tb; } held_error;
static held_error hold_error(void) {
  held_error e;
  PyErr_Fetch(&e.type, &e.value, &e.tb);
  return e;
}
static void restore_error(held_error e) {
  PyErr_Clear();
  PyErr_Restore(e.type, e.value, e.tb);
}
#endif

#define BRACKETED_FIRST 3  // buffers.BRACKETED_FIRST: those launches take the Python path
#define ALIGN 128          // slabs.ALIGN

typedef struct {
  PyObject_HEAD
  // given at creation (see fast_launch.py)
  PyObject *path, *slabs, *lock, *open, *tls, *tool_state, *capturing, *next_seq, *bracket_after,
      *is_library, *classify, *config_of, *not_taken;
  long long first, every, total, largest;  // the keep policy (total < 0: no bound); Slabs.largest
  double ship_after;                         // slabs.SHIP_AFTER_S
  // The last call site and grid, reused while they repeat (as in a loop): a tuple fewer each
  // for the garbage collector, whose passes a kept launch's tuples would otherwise bring on.
  PyObject *last_code, *last_site, *last_grid;
  int last_lasti;  // the last site's instruction: the same one needs no line lookup
  long long last_x, last_y, last_z;
  // attribute names, interned once
  PyObject *s_seen, *s_next_keep, *s_active, *s_capturing, *s_kept, *s_depth, *s_tuning,
      *s_measure, *s_autotuner, *s_not_kept, *s_launch, *s_config, *s__depth;
  PyObject *acquire, *release;  // the slabs' lock's methods, bound once
  // The path's and the slabs' instance dicts: their flags and counts read and written there
  // directly (what their attribute access does, without the look through their classes).
  PyObject *path_dict, *slabs_dict;
} Fast;

static double now_s(void) {  // time.perf_counter's clock on Linux
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// An attribute as a C integer; -1 with an error set when absent or not an int.
static long long attr_ll(PyObject *o, PyObject *name) {
  PyObject *v = PyObject_GetAttr(o, name);
  if (!v) return -1;
  long long r = PyLong_AsLongLong(v);
  Py_DECREF(v);
  return r;
}

// An instance attribute held in dict `d`, as a C integer; -1 with an error set when absent.
static long long dict_ll(PyObject *d, PyObject *name) {
  PyObject *v = PyDict_GetItemWithError(d, name);  // borrowed
  if (!v) {
    if (!PyErr_Occurred()) PyErr_SetObject(PyExc_AttributeError, name);
    return -1;
  }
  return PyLong_AsLongLong(v);
}

// Sets instance attribute `name` (held in dict `d`) to integer `value`; -1 on error.
static int dict_set_ll(PyObject *d, PyObject *name, long long value) {
  PyObject *v = PyLong_FromLongLong(value);
  int r = v ? PyDict_SetItem(d, name, v) : -1;
  Py_XDECREF(v);
  return r;
}

// Whether a thread-local attribute is set to something other than None (absent: not set).
static int tls_set(PyObject *tls, PyObject *name) {
  PyObject *v;
  if (PyObject_GetOptionalAttr(tls, name, &v) < 0) return -1;
  int set = v != NULL && v != Py_None;
  Py_XDECREF(v);
  return set;
}

// (file, line, function) of the first frame whose file is the program's, or None; a borrowed
// frame walk from the caller (call_site.program_frame's C twin; files are classified by
// `classify`, which fills `is_library`).
static PyObject *program_frame(Fast *f) {
  PyFrameObject *frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  while (frame) {
    PyCodeObject *code = PyFrame_GetCode(frame);
    PyObject *name = code->co_filename;
    PyObject *lib = PyDict_GetItemWithError(f->is_library, name);  // borrowed
    if (!lib) {
      if (PyErr_Occurred()) goto fail_code;
      PyObject *r = PyObject_CallOneArg(f->classify, name);
      if (!r) goto fail_code;
      lib = PyObject_IsTrue(r) ? Py_True : Py_False;
      Py_DECREF(r);
    }
    if (lib == Py_False) {
      int lasti = PyFrame_GetLasti(frame);
      PyObject *site;
      if ((PyObject *)code == f->last_code && lasti == f->last_lasti) {
        site = Py_NewRef(f->last_site);
      } else if ((site = Py_BuildValue("(OiO)", name, PyFrame_GetLineNumber(frame), code->co_name))) {
        Py_XSETREF(f->last_site, Py_NewRef(site));
        Py_XSETREF(f->last_code, Py_NewRef((PyObject *)code));
        f->last_lasti = lasti;
      }
      Py_DECREF(code);
      Py_DECREF(frame);
      return site;
    }
    Py_DECREF(code);
    PyFrameObject *back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
    continue;
  fail_code:
    Py_DECREF(code);
    Py_DECREF(frame);
    return NULL;
  }
  Py_RETURN_NONE;
}

// One build's launch counts (keep_policy.LaunchCounts's twin, the one sessions with C launchers
// make): seen and next_keep as C fields.
typedef struct {
  PyObject_HEAD
  PyObject *name;
  long long seen;
  double next_keep;  // (the policy's NEVER is infinity)
} Counts;

static void Counts_dealloc(Counts *c) {
  Py_CLEAR(c->name);
  Py_TYPE(c)->tp_free((PyObject *)c);
}

// Counts(name, policy): none seen; the next kept is the policy's first.
static PyObject *Counts_new(PyTypeObject *type, PyObject *a, PyObject *kw) {
  (void)kw;
  PyObject *name, *policy;
  if (!PyArg_ParseTuple(a, "OO", &name, &policy)) return NULL;
  PyObject *first = PyObject_CallMethod(policy, "next_after", "i", 0);
  double next = first ? PyFloat_AsDouble(first) : -1.0;
  Py_XDECREF(first);
  if (PyErr_Occurred()) return NULL;
  Counts *c = (Counts *)type->tp_alloc(type, 0);
  if (!c) return NULL;
  c->name = Py_NewRef(name), c->seen = 0, c->next_keep = next;
  return (PyObject *)c;
}

#define FIELD(name, kind) {#name, kind, offsetof(Counts, name), 0, NULL},
static PyMemberDef Counts_members[] = {
    FIELD(name, T_OBJECT_EX) FIELD(seen, T_LONGLONG) FIELD(next_keep, T_DOUBLE) {NULL, 0, 0, 0, NULL}};
#undef FIELD

static PyTypeObject CountsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proton_inject_fast_launch.Counts",
    .tp_basicsize = sizeof(Counts),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Counts_new,
    .tp_dealloc = (destructor)Counts_dealloc,
    .tp_members = Counts_members,
    .tp_doc = "One build's launch counts (keep_policy.LaunchCounts, as C fields).",
};

// Counts one more launch of `counts` (C's or Python's): its count, or -1 with an error set;
// `keep`: whether the policy keeps it.
static long long count_launch(Fast *f, PyObject *counts, int *keep) {
  if (Py_IS_TYPE(counts, &CountsType)) {
    Counts *c = (Counts *)counts;
    *keep = (double)++c->seen >= c->next_keep;
    return c->seen;
  }
  long long seen = attr_ll(counts, f->s_seen);
  PyObject *v = seen < 0 ? NULL : PyLong_FromLongLong(++seen);
  int bad = !v || PyObject_SetAttr(counts, f->s_seen, v) < 0;
  Py_XDECREF(v);
  PyObject *next = bad ? NULL : PyObject_GetAttr(counts, f->s_next_keep);
  if (!next) return -1;
  *keep = PyLong_CheckExact(next) ? seen >= PyLong_AsLongLong(next) : (double)seen >= PyFloat_AsDouble(next);
  Py_DECREF(next);
  return PyErr_Occurred() ? -1 : seen;
}

// The policy's next keep after `seen` launches (KeepPolicy.next_after) into `counts`; -1 on error.
static int set_next_keep(Fast *f, PyObject *counts, long long seen) {
  long long next = seen < f->first ? seen + 1 : f->every <= 0 ? -1 : (seen / f->every + 1) * f->every;
  if (Py_IS_TYPE(counts, &CountsType)) {
    ((Counts *)counts)->next_keep = next < 0 ? Py_HUGE_VAL : (double)next;
    return 0;
  }
  PyObject *v = next < 0 ? PyFloat_FromDouble(Py_HUGE_VAL) : PyLong_FromLongLong(next);
  int r = v ? PyObject_SetAttr(counts, f->s_next_keep, v) : -1;
  Py_XDECREF(v);
  return r;
}

// A slab open for kept launches (slabs.Slab's twin, the one sessions use when this module is
// built): the same attributes, which the C path reads and writes as fields.
typedef struct {
  PyObject_HEAD
  PyObject *buf, *streams, *launches;
  long long base, device, size, used;
  double opened;
} Slab;

static void Slab_dealloc(Slab *s) {
  Py_CLEAR(s->buf); Py_CLEAR(s->streams); Py_CLEAR(s->launches);
  Py_TYPE(s)->tp_free((PyObject *)s);
}

// Slab(buf, device): buf a device (or, in tests, host) tensor of bytes.
static PyObject *Slab_new(PyTypeObject *type, PyObject *a, PyObject *kw) {
  (void)kw;
  PyObject *buf;
  long long device;
  if (!PyArg_ParseTuple(a, "OL", &buf, &device)) return NULL;
  long long base = -1, size = -1;
  PyObject *v = PyObject_CallMethod(buf, "data_ptr", NULL);
  if (v) base = PyLong_AsLongLong(v), Py_DECREF(v);
  v = PyErr_Occurred() ? NULL : PyObject_CallMethod(buf, "numel", NULL);
  if (v) size = PyLong_AsLongLong(v), Py_DECREF(v);
  if (PyErr_Occurred()) return NULL;
  Slab *s = (Slab *)type->tp_alloc(type, 0);
  if (!s) return NULL;
  s->buf = Py_NewRef(buf), s->streams = PySet_New(NULL), s->launches = PyList_New(0);
  s->base = base, s->device = device, s->size = size, s->used = 0, s->opened = now_s();
  if (!s->streams || !s->launches) {
    Py_DECREF(s);
    return NULL;
  }
  return (PyObject *)s;
}

#define FIELD(name, kind) {#name, kind, offsetof(Slab, name), 0, NULL},
static PyMemberDef Slab_members[] = {
    FIELD(buf, T_OBJECT_EX) FIELD(streams, T_OBJECT_EX) FIELD(launches, T_OBJECT_EX) FIELD(base, T_LONGLONG)
    FIELD(device, T_LONGLONG) FIELD(size, T_LONGLONG) FIELD(used, T_LONGLONG) FIELD(opened, T_DOUBLE)
    {NULL, 0, 0, 0, NULL}};
#undef FIELD

static PyTypeObject SlabType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proton_inject_fast_launch.Slab",
    .tp_basicsize = sizeof(Slab),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Slab_new,
    .tp_dealloc = (destructor)Slab_dealloc,
    .tp_members = Slab_members,
    .tp_doc = "A slab open for kept launches (collect/slabs.py's Slab, as C fields).",
};

// An instrumented build's launcher in C (launch_path.KernelLauncher's twin): Triton calls it as
// the build's `run`; its fields are the Python launcher's attributes.
typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;  // Launcher_call: Triton's call of it builds no tuple
  PyObject *inner, *info, *counts, *path, *device, *direct, *coop, *pdl, *discard, *fast;
  long long per_cta, discard_bytes;
} Launcher;

// Triton's C entry point of `w` with profile scratch `scratch` (argv as Triton calls `run`:
// gx, gy, gz, stream, function, then the launcher's own arguments).
static PyObject *call_entry(Launcher *w, PyObject *const *argv, Py_ssize_t nargs, PyObject *stream,
                            PyObject *scratch) {
  PyObject *small[64], **call = small;
  Py_ssize_t n = 4 + nargs;  // (9 fixed, then argv[5:])
  if (n > 64 && !(call = PyMem_Malloc(sizeof(PyObject *) * (size_t)n))) return PyErr_NoMemory();
  PyObject *head[9] = {argv[0], argv[1], argv[2], stream, argv[4], w->coop ? w->coop : Py_False,
                       w->pdl ? w->pdl : Py_False, Py_None, scratch};
  for (int i = 0; i < 9; i++) call[i] = head[i];
  for (Py_ssize_t i = 5; i < nargs; i++) call[4 + i] = argv[i];
  PyObject *ret = PyObject_Vectorcall(w->direct, call, (size_t)n, NULL);
  if (call != small) PyMem_Free(call);
  return ret;
}

// (`seen`: the launch's count, this launch included)
static PyObject *fast_keep(Fast *f, Launcher *w, PyObject *const *argv, Py_ssize_t nargs, long long seen) {
  PyObject *gx = argv[0], *gy = argv[1], *gz = argv[2], *stream = argv[3];
  PyObject *counts = w->counts, *direct = w->direct, *info = w->info, *dev = w->device;
  PyObject *config = NULL, *slab = NULL, *site = NULL, *seq = NULL, *ret = NULL, *v = NULL;
  held_error held;
  int locked = 0;

  // The policy's next keep, as the Python path sets it first.
  if (set_next_keep(f, counts, seen) < 0) goto not_taken;
  if (seen <= BRACKETED_FIRST) goto not_taken;  // bracketed: the Python path

  // The launch path's checks, cheapest first.
  if (PyDict_GetItemWithError(f->path_dict, f->s_active) != Py_True) goto not_taken;
  if (dict_ll(f->path_dict, f->s_capturing) != 0) goto not_taken;
  if (f->total >= 0 && dict_ll(f->path_dict, f->s_kept) >= f->total) goto not_taken;
  if (PyErr_Occurred()) goto not_taken;
  if (PyObject_GetOptionalAttr(f->tool_state, f->s_depth, &v) < 0) goto not_taken;
  if (v && PyObject_IsTrue(v)) goto not_taken;
  Py_CLEAR(v);
  if (tls_set(f->tls, f->s_tuning) != 0 || tls_set(f->tls, f->s_measure) != 0) goto not_taken;
  int tuned = tls_set(f->tls, f->s_autotuner);  // launched by an autotuner: its best config
  if (tuned < 0) goto not_taken;
  if (!direct || direct == Py_None) goto not_taken;
  long long per_cta = w->per_cta;
  long long x = PyLong_AsLongLong(gx), y = PyLong_AsLongLong(gy), z = PyLong_AsLongLong(gz);
  if (PyErr_Occurred() || x <= 0 || y <= 0 || z <= 0 || per_cta <= 0) goto not_taken;
  long long size = x;  // (each product at most largest before the next factor: no overflow)
  if (size > f->largest || (size *= y) > f->largest || (size *= z) > f->largest ||
      (size *= per_cta) > f->largest)
    goto not_taken;
  if (!dev || !PyLong_Check(dev) || !info) goto not_taken;  // (device: the key of its slab and bracket time)
  config = tuned ? NULL : PyObject_GetAttr(info, f->s_config);
  if (!config || config == Py_None) {  // (LaunchPath._config: cached per build and per config)
    Py_XDECREF(config);
    config = PyObject_CallFunctionObjArgs(f->config_of, info, Py_None, NULL);
    if (!config) goto not_taken;
  }
  double now = now_s();
  PyObject *due = PyDict_GetItemWithError(f->bracket_after, dev);  // borrowed
  if (PyErr_Occurred() || !due || now >= PyFloat_AsDouble(due)) goto not_taken;  // a bracket due
  v = PyObject_CallNoArgs(f->capturing);
  if (!v || v != Py_False) goto not_taken;
  Py_CLEAR(v);
  site = program_frame(f);
  if (!site) goto not_taken;

  // The slab: under the slabs' lock, as Slabs.launch.
  v = PyObject_CallNoArgs(f->acquire);
  if (!v) goto not_taken;
  Py_CLEAR(v);
  locked = 1;
  long long depth = dict_ll(f->slabs_dict, f->s__depth);
  if (depth != 0) goto not_taken;  // a hook's launch inside one, or an error
  Slab *sl = (Slab *)PyDict_GetItemWithError(f->open, dev);  // borrowed
  if (!sl || !Py_IS_TYPE(sl, &SlabType)) goto not_taken;  // none open (or Python's): the Python path
  slab = Py_NewRef((PyObject *)sl);
  long long used = sl->used, step = (size + ALIGN - 1) / ALIGN * ALIGN, base = sl->base;
  if (base <= 0 || used + step > sl->size || now - sl->opened > f->ship_after) goto not_taken;  // to ship
  seq = PyObject_CallNoArgs(f->next_seq);
  if (!seq) goto not_taken;
  PyObject *s = stream == Py_None ? NULL : stream;
  PyObject *s0 = s ? (Py_INCREF(s), s) : PyLong_FromLong(0);
  if (!s0) goto not_taken;
  int bad = PySet_Add(sl->streams, s0) < 0;
  if (!bad) sl->used = used + step;
  long long kept = bad ? -1 : dict_ll(f->path_dict, f->s_kept);
  bad = bad || kept < 0 || dict_set_ll(f->path_dict, f->s_kept, kept + 1) < 0;
  if (bad) {
    Py_DECREF(s0);
    goto not_taken;  // (bytes taken and not used stay zero: harmless)
  }

  // The launch: Triton's C entry point with the slab's bytes, the depth marked for hooks.
  PyObject *address = PyLong_FromLongLong(base + used);
  if (!address || dict_set_ll(f->slabs_dict, f->s__depth, 1) < 0) {
    Py_XDECREF(address);
    Py_DECREF(s0);
    goto not_taken;
  }
  ret = call_entry(w, argv, nargs, s0, address);
  held = hold_error();  // (the program's error, if any, kept across the reset)
  dict_set_ll(f->slabs_dict, f->s__depth, 0);
  restore_error(held);
  if (ret) {  // recorded: its entry (SlabLaunch's fields) in the slab
    PyObject *grid;
    if (f->last_grid && x == f->last_x && y == f->last_y && z == f->last_z) {
      grid = Py_NewRef(f->last_grid);
    } else if ((grid = PyTuple_Pack(3, gx, gy, gz))) {
      Py_XSETREF(f->last_grid, Py_NewRef(grid));
      f->last_x = x, f->last_y = y, f->last_z = z;
    }
    PyObject *entry = grid ? PyTuple_New(11) : NULL;
    if (entry) {
      PyObject *items[11] = {seq, info, grid, s0, dev, config, Py_False, site, NULL, NULL, Py_None};
      for (int i = 0; i < 11; i++)
        if (items[i]) PyTuple_SET_ITEM(entry, i, Py_NewRef(items[i]));
      PyTuple_SET_ITEM(entry, 8, PyLong_FromLongLong(used));
      PyTuple_SET_ITEM(entry, 9, PyLong_FromLongLong(size));
      if (!PyTuple_GET_ITEM(entry, 8) || !PyTuple_GET_ITEM(entry, 9)) Py_CLEAR(entry);
      // Out of the garbage collector's sight: it holds no cycle, and thousands of kept launches'
      // entries, alive until the slab is saved, would otherwise bring on its passes.
      else PyObject_GC_UnTrack(entry);
    }
    Py_XDECREF(grid);
    if (!entry || PyList_Append(sl->launches, entry) < 0) PyErr_Clear();  // (lost, never raised)
    Py_XDECREF(entry);
  }
  Py_DECREF(address);
  Py_DECREF(s0);
  goto done;

not_taken:
  PyErr_Clear();
  Py_XDECREF(v);
  ret = Py_NewRef(f->not_taken);
done:
  if (locked) {  // (an error of the program's own launch is kept across the release)
    held = hold_error();
    PyObject *r = PyObject_CallNoArgs(f->release);
    Py_XDECREF(r);
    restore_error(held);
  }
  Py_XDECREF(config); Py_XDECREF(slab); Py_XDECREF(site); Py_XDECREF(seq);
  return ret;
}

static void Fast_dealloc(Fast *f) {
  PyObject **refs[] = {&f->path, &f->slabs, &f->lock, &f->open, &f->tls, &f->tool_state, &f->capturing,
                       &f->next_seq, &f->bracket_after, &f->is_library, &f->classify, &f->config_of,
                       &f->not_taken,
                       &f->s_seen, &f->s_next_keep, &f->s_active, &f->s_capturing, &f->s_kept,
                       &f->s_depth, &f->s_tuning, &f->s_measure, &f->s_autotuner, &f->s_not_kept,
                       &f->s_launch, &f->s_config, &f->s__depth, &f->acquire, &f->release,
                       &f->path_dict, &f->slabs_dict, &f->last_code, &f->last_site, &f->last_grid};
  for (size_t i = 0; i < sizeof(refs) / sizeof(refs[0]); i++) Py_CLEAR(*refs[i]);
  Py_TYPE(f)->tp_free((PyObject *)f);
}

// Fast(path, slabs, lock, open, tls, tool_state, capturing, next_seq, bracket_after, is_library,
//      classify, config_of, not_taken, first, every, total, largest, ship_after)
static PyObject *Fast_new(PyTypeObject *type, PyObject *a, PyObject *kw) {
  (void)kw;
  Fast *f = (Fast *)type->tp_alloc(type, 0);
  if (!f) return NULL;
  if (!PyArg_ParseTuple(a, "OOOOOOOOOOOOOLLLLd", &f->path, &f->slabs, &f->lock, &f->open, &f->tls,
                        &f->tool_state, &f->capturing, &f->next_seq, &f->bracket_after, &f->is_library,
                        &f->classify, &f->config_of, &f->not_taken, &f->first, &f->every, &f->total,
                        &f->largest, &f->ship_after)) {
    f->path = f->slabs = f->lock = f->open = f->tls = f->tool_state = f->capturing = f->next_seq = NULL;
    f->bracket_after = f->is_library = f->classify = f->config_of = f->not_taken = NULL;
    Py_DECREF(f);
    return NULL;
  }
  if (!PyDict_Check(f->open) || !PyDict_Check(f->bracket_after) || !PyDict_Check(f->is_library)) {
    f->path = f->slabs = f->lock = f->open = f->tls = f->tool_state = f->capturing = f->next_seq = NULL;
    f->bracket_after = f->is_library = f->classify = f->config_of = f->not_taken = NULL;
    Py_DECREF(f);
    PyErr_SetString(PyExc_TypeError, "open, bracket_after and is_library must be dicts");
    return NULL;
  }
  PyObject *objs[] = {f->path, f->slabs, f->lock, f->open, f->tls, f->tool_state, f->capturing,
                      f->next_seq, f->bracket_after, f->is_library, f->classify, f->config_of,
                      f->not_taken};
  for (size_t i = 0; i < sizeof(objs) / sizeof(objs[0]); i++) Py_INCREF(objs[i]);
#define NAME(field, text) if (!(f->field = PyUnicode_InternFromString(text))) goto fail;
  NAME(s_seen, "seen") NAME(s_next_keep, "next_keep") NAME(s_active, "active")
  NAME(s_capturing, "capturing") NAME(s_kept, "kept") NAME(s_depth, "depth") NAME(s_tuning, "tuning")
  NAME(s_measure, "measure") NAME(s_autotuner, "autotuner") NAME(s_not_kept, "not_kept")
  NAME(s_launch, "launch")
  NAME(s_config, "config") NAME(s__depth, "_depth")
#undef NAME
  if (!(f->acquire = PyObject_GetAttrString(f->lock, "acquire")) ||
      !(f->release = PyObject_GetAttrString(f->lock, "release")) ||
      !(f->path_dict = PyObject_GetAttrString(f->path, "__dict__")) ||
      !(f->slabs_dict = PyObject_GetAttrString(f->slabs, "__dict__")))
    goto fail;
  if (!PyDict_Check(f->path_dict) || !PyDict_Check(f->slabs_dict)) {
    PyErr_SetString(PyExc_TypeError, "the path and the slabs must keep their attributes in a dict");
    goto fail;
  }
  return (PyObject *)f;
fail:
  Py_DECREF(f);
  return NULL;
}

static PyTypeObject FastType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proton_inject_fast_launch.Fast",
    .tp_basicsize = sizeof(Fast),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Fast_new,
    .tp_dealloc = (destructor)Fast_dealloc,
    .tp_doc = "A session's state for its C launchers' kept launches (collect/fast_launch.py).",
};

// path.<method>(w, gx, gy, gz, stream, function, args): the Python launch path for the launches
// the C one leaves (LaunchPath.not_kept, LaunchPath.launch).
static PyObject *python_path(Launcher *w, PyObject *method, PyObject *const *argv, Py_ssize_t nargs) {
  PyObject *args = PyTuple_New(nargs - 5);
  if (!args) return NULL;
  for (Py_ssize_t i = 5; i < nargs; i++) PyTuple_SET_ITEM(args, i - 5, Py_NewRef(argv[i]));
  PyObject *call[8] = {w->path, (PyObject *)w, argv[0], argv[1], argv[2], argv[3], argv[4], args};
  PyObject *ret = PyObject_VectorcallMethod(method, call, 8, NULL);
  Py_DECREF(args);
  return ret;
}

// KernelLauncher.__call__'s twin: count the launch; a launch not kept straight to Triton's entry
// point with the throw-away buffer (or LaunchPath.not_kept); a kept one through fast_keep, else
// LaunchPath.launch. Anything unexpected of ours: Triton's own launcher, unprofiled.
static PyObject *Launcher_call(Launcher *w, PyObject *const *argv, size_t nargsf, PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  Fast *f = (Fast *)w->fast;
  if (kwnames || nargs < 5 || !f || !w->counts || !w->path)
    return PyObject_Vectorcall(w->inner, argv, nargsf, kwnames);
  int keep;
  long long seen = count_launch(f, w->counts, &keep);
  if (seen < 0) goto plain;
  if (!keep) {
    long long capturing = dict_ll(f->path_dict, f->s_capturing);
    if (PyErr_Occurred()) goto plain;
    if (!capturing) {
      long long x = PyLong_AsLongLong(argv[0]), y = PyLong_AsLongLong(argv[1]), z = PyLong_AsLongLong(argv[2]);
      if (PyErr_Occurred()) goto plain;
      long long need = x * y * z * w->per_cta;
      if (w->direct && w->direct != Py_None && w->discard && w->discard != Py_None && need <= w->discard_bytes)
        return call_entry(w, argv, nargs, argv[3], w->discard);
      return python_path(w, f->s_not_kept, argv, nargs);
    }
  }
  PyObject *ret = fast_keep(f, w, argv, nargs, seen);
  if (ret != f->not_taken) return ret;
  Py_DECREF(ret);
  return python_path(w, f->s_launch, argv, nargs);
plain:
  PyErr_Clear();
  return PyObject_Vectorcall(w->inner, argv, nargsf, NULL);
}

// Attributes not its own are the wrapped launcher's, as KernelLauncher.__getattr__.
static PyObject *Launcher_getattro(Launcher *w, PyObject *name) {
  PyObject *v = PyObject_GenericGetAttr((PyObject *)w, name);
  if (v || !w->inner || !PyErr_ExceptionMatches(PyExc_AttributeError)) return v;
  PyErr_Clear();
  return PyObject_GetAttr(w->inner, name);
}

static int Launcher_traverse(Launcher *w, visitproc visit, void *arg) {
  Py_VISIT(w->inner); Py_VISIT(w->info); Py_VISIT(w->counts); Py_VISIT(w->path); Py_VISIT(w->device);
  Py_VISIT(w->direct); Py_VISIT(w->coop); Py_VISIT(w->pdl); Py_VISIT(w->discard); Py_VISIT(w->fast);
  return 0;
}

static int Launcher_clear(Launcher *w) {
  Py_CLEAR(w->inner); Py_CLEAR(w->info); Py_CLEAR(w->counts); Py_CLEAR(w->path); Py_CLEAR(w->device);
  Py_CLEAR(w->direct); Py_CLEAR(w->coop); Py_CLEAR(w->pdl); Py_CLEAR(w->discard); Py_CLEAR(w->fast);
  return 0;
}

static void Launcher_dealloc(Launcher *w) {
  PyObject_GC_UnTrack(w);
  Launcher_clear(w);
  Py_TYPE(w)->tp_free((PyObject *)w);
}

// Launcher(fast, inner, info, counts, path, device, direct, coop, pdl, per_cta)
static PyObject *Launcher_new(PyTypeObject *type, PyObject *a, PyObject *kw) {
  (void)kw;
  PyObject *fast, *inner, *info, *counts, *path, *device, *direct, *coop, *pdl;
  long long per_cta;
  if (!PyArg_ParseTuple(a, "O!OOOOOOOOL", &FastType, &fast, &inner, &info, &counts, &path, &device, &direct,
                        &coop, &pdl, &per_cta))
    return NULL;
  if (((Fast *)fast)->path != path) {  // (its flags are read through the Fast's dict of the path)
    PyErr_SetString(PyExc_ValueError, "a launcher's path must be its Fast's");
    return NULL;
  }
  Launcher *w = (Launcher *)type->tp_alloc(type, 0);
  if (!w) return NULL;
  w->fast = Py_NewRef(fast), w->inner = Py_NewRef(inner), w->info = Py_NewRef(info);
  w->counts = Py_NewRef(counts), w->path = Py_NewRef(path), w->device = Py_NewRef(device);
  w->direct = Py_NewRef(direct), w->coop = Py_NewRef(coop), w->pdl = Py_NewRef(pdl);
  w->discard = Py_NewRef(Py_None);
  w->per_cta = per_cta, w->discard_bytes = -1;
  w->vectorcall = (vectorcallfunc)Launcher_call;
  return (PyObject *)w;
}

static PyObject *Launcher_self(PyObject *w, PyObject *unused) {  // a copy is the launcher itself
  (void)unused;
  return Py_NewRef(w);
}

static PyMethodDef Launcher_methods[] = {
    {"__copy__", Launcher_self, METH_NOARGS, NULL},
    {"__deepcopy__", Launcher_self, METH_O, NULL},
    {NULL, NULL, 0, NULL}};

#define FIELD(name, kind) {#name, kind, offsetof(Launcher, name), 0, NULL},
static PyMemberDef Launcher_members[] = {
    FIELD(inner, T_OBJECT_EX) FIELD(info, T_OBJECT_EX) FIELD(counts, T_OBJECT_EX) FIELD(path, T_OBJECT_EX)
    FIELD(device, T_OBJECT_EX) FIELD(direct, T_OBJECT) FIELD(coop, T_OBJECT) FIELD(pdl, T_OBJECT)
    FIELD(discard, T_OBJECT) FIELD(fast, T_OBJECT) FIELD(per_cta, T_LONGLONG) FIELD(discard_bytes, T_LONGLONG)
    {NULL, 0, 0, 0, NULL}};
#undef FIELD

static PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proton_inject_fast_launch.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_new = Launcher_new,
    .tp_dealloc = (destructor)Launcher_dealloc,
    .tp_traverse = (traverseproc)Launcher_traverse,
    .tp_clear = (inquiry)Launcher_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Launcher, vectorcall),
    .tp_getattro = (getattrofunc)Launcher_getattro,
    .tp_members = Launcher_members,
    .tp_methods = Launcher_methods,
    .tp_doc = "An instrumented build's launcher in C (collect/fast_launch.py).",
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "proton_inject_fast_launch", .m_size = -1};

PyMODINIT_FUNC PyInit_proton_inject_fast_launch(void) {
  if (PyType_Ready(&FastType) < 0 || PyType_Ready(&LauncherType) < 0 || PyType_Ready(&SlabType) < 0 ||
      PyType_Ready(&CountsType) < 0)
    return NULL;
  PyObject *m = PyModule_Create(&module);
  if (!m) return NULL;
  Py_INCREF(&FastType);
  Py_INCREF(&LauncherType);
  Py_INCREF(&SlabType);
  Py_INCREF(&CountsType);
  if (PyModule_AddObject(m, "Fast", (PyObject *)&FastType) < 0 ||
      PyModule_AddObject(m, "Launcher", (PyObject *)&LauncherType) < 0 ||
      PyModule_AddObject(m, "Slab", (PyObject *)&SlabType) < 0 ||
      PyModule_AddObject(m, "Counts", (PyObject *)&CountsType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}

// The state a session's C launchers share with the Python launch path (fast_launch.py compiles
// this file and then fast_launch.c as one module): `Fast`, the session's objects and flags they
// read, and the C twins of the Python path's per-build counts (keep_policy.LaunchCounts) and open
// slab (slabs.Slab), whose fields both paths read and write.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>
#include <stddef.h>
#include <stdint.h>
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

// A field of C struct `type` as the Python attribute of the same name (flags: READONLY or 0).
#define MEMBER(type, name, kind, flags) {#name, kind, offsetof(type, name), flags, NULL},

#define BRACKETED_FIRST 3  // buffers.BRACKETED_FIRST: those launches take the Python path
#define ALIGN 128          // slabs.ALIGN

// The slabs' lock (threading.RLock's twin for a session with C launchers): re-entrant, since
// Triton's launcher calls the program's launch hooks, and a hook may launch. The C path takes it
// with two C calls where RLock's acquire, a Python call that parses its arguments, cost ~0.1 us.
typedef struct {
  PyObject_HEAD
  PyThread_type_lock lock;
  unsigned long owner;
  long long count;
} RLock;

static void rlock_take(RLock *l) {
  unsigned long me = PyThread_get_thread_ident();
  if (l->count > 0 && l->owner == me) {
    l->count++;
    return;
  }
  if (!PyThread_acquire_lock(l->lock, NOWAIT_LOCK)) {  // (held by another thread: wait without the GIL)
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(l->lock, WAIT_LOCK);
    Py_END_ALLOW_THREADS
  }
  l->owner = me, l->count = 1;
}

static int rlock_give(RLock *l) {
  if (l->count <= 0 || l->owner != PyThread_get_thread_ident()) {
    PyErr_SetString(PyExc_RuntimeError, "cannot release un-acquired lock");
    return -1;
  }
  if (--l->count == 0) {
    l->owner = 0;
    PyThread_release_lock(l->lock);
  }
  return 0;
}

static PyObject *RLock_acquire(RLock *l, PyObject *unused) {
  (void)unused;
  rlock_take(l);
  Py_RETURN_TRUE;
}

static PyObject *RLock_release(RLock *l, PyObject *unused) {
  (void)unused;
  if (rlock_give(l) < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *RLock_exit(RLock *l, PyObject *args) {
  (void)args;
  if (rlock_give(l) < 0) return NULL;
  Py_RETURN_FALSE;
}

static PyObject *RLock_new(PyTypeObject *type, PyObject *a, PyObject *kw) {
  (void)a, (void)kw;
  RLock *l = (RLock *)type->tp_alloc(type, 0);
  if (!l) return NULL;
  if (!(l->lock = PyThread_allocate_lock())) {
    Py_DECREF(l);
    return PyErr_NoMemory();
  }
  return (PyObject *)l;
}

static void RLock_dealloc(RLock *l) {
  if (l->lock) PyThread_free_lock(l->lock);
  Py_TYPE(l)->tp_free((PyObject *)l);
}

static PyMethodDef RLock_methods[] = {
    {"acquire", (PyCFunction)RLock_acquire, METH_NOARGS, NULL},
    {"release", (PyCFunction)RLock_release, METH_NOARGS, NULL},
    {"__enter__", (PyCFunction)RLock_acquire, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)RLock_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject RLockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proton_inject_fast_launch.Lock",
    .tp_basicsize = sizeof(RLock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = RLock_new,
    .tp_dealloc = (destructor)RLock_dealloc,
    .tp_methods = RLock_methods,
    .tp_doc = "The slabs' re-entrant lock, taken by the C path without a Python call.",
};

typedef struct {
  PyObject_HEAD
  // given at creation (see fast_launch.py)
  PyObject *path, *slabs, *lock, *open, *tls, *tool_state, *capturing, *next_seq, *bracket_after,
      *is_library, *classify, *config_of, *not_taken;
  long long first, every, total, largest;  // the keep policy (total < 0: no bound); Slabs.largest
  double rate, started;  // the policy's rate (< 0: no bound) and its clock's start (LaunchPath.started)
  long long kept;  // LaunchPath.kept while the C launchers are on (it reads and writes it here)
  long long sampled;  // LaunchPath.sampled, the same way
  double ship_after;                         // slabs.SHIP_AFTER_S
  // The last call site, reused while it repeats (as in a loop): a tuple fewer for the garbage
  // collector, whose passes a kept launch's tuples would otherwise bring on.
  PyObject *last_code, *last_site;
  int last_lasti;  // the last site's instruction: the same one needs no line lookup
  // attribute names, interned once
  PyObject *s_active, *s_capturing, *s_depth, *s_tuning,
      *s_measure, *s_autotuner, *s_not_kept, *s_launch, *s_config, *s__depth, *s_dict, *s_self;
  PyObject *acquire, *release;  // the slabs' lock's methods, bound once
  RLock *c_lock;                // the lock itself where it is the C one (borrowed from `lock`)
  // The CUDA driver's cuStreamIsCapturing (CUresult (CUstream, CUstreamCaptureStatus *)), where
  // it is loaded: one driver call on the launch's own stream, in place of torch's query of the
  // current stream (`capturing`: a call into torch, which asks the CUDA runtime).
  int (*stream_capturing)(void *, int *);
  PyObject *seq_iter;           // the sink's launch numbers as an iterator, where next_seq is one's __next__
  // The path's and the slabs' instance dicts: their flags and counts read and written there
  // directly (what their attribute access does, without the look through their classes).
  PyObject *path_dict, *slabs_dict;
} Fast;

static double now_s(void) {  // time.perf_counter's clock on Linux
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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

// Whether key `name` of dict `d` (this thread's dict of a threading.local, whose class holds
// None defaults) is set to something other than None; -1 with an error set.
static int set_in(PyObject *d, PyObject *name) {
  PyObject *v = PyDict_GetItemWithError(d, name);  // borrowed
  return v ? v != Py_None : (PyErr_Occurred() ? -1 : 0);
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

#define FIELD(name, kind) MEMBER(Counts, name, kind, 0)
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

// The policy's next keep after `seen` launches (KeepPolicy.next_after) into `c`.
static void set_next_keep(Fast *f, Counts *c, long long seen) {
  long long next = seen < f->first ? seen + 1 : f->every <= 0 ? -1 : (seen / f->every + 1) * f->every;
  c->next_keep = next < 0 ? Py_HUGE_VAL : (double)next;
}

// Counts one more launch: whether the policy keeps it, past a build's first launches within its
// rate (LaunchPath.within_rate, KeepPolicy.within_rate); one that is not waits for the next count.
static int count_launch(Fast *f, Counts *c) {
  if ((double)++c->seen < c->next_keep) return 0;
  if (c->seen <= f->first || f->rate < 0) return 1;
  if ((double)(f->sampled + 1) <= f->rate * (now_s() - f->started + 1.0)) {
    f->sampled++;
    return 1;
  }
  set_next_keep(f, c, c->seen);
  return 0;
}

// A kept launch of the C path, not yet a Python tuple (slabs.SlabLaunch's fields; `tuning`
// False, no bracket): made into one when the slab's `launches` is read (by the ship's save, on
// the writer's thread), not on the launch path.
typedef struct {
  long long seq, gx, gy, gz, offset, size;
  PyObject *info, *stream, *device, *config, *site;  // strong references
} SlabEntry;

// A slab open for kept launches (slabs.Slab's twin, the one sessions use when this module is
// built): the same attributes, which the C path reads and writes as fields, but `launches`:
// reading it first appends the C path's pending entries (in launch order: the Python path
// appends through it).
typedef struct {
  PyObject_HEAD
  PyObject *buf, *streams, *launches;
  long long base, device, size, used;
  double opened;
  SlabEntry *pending;
  Py_ssize_t n_pending, cap_pending;
  long long last_stream;  // the stream the C path last added to `streams` (-1: none yet)
} Slab;

static void drop_entries(SlabEntry *p, Py_ssize_t from, Py_ssize_t n) {
  for (Py_ssize_t i = from; i < n; i++) {
    Py_DECREF(p[i].info); Py_DECREF(p[i].stream); Py_DECREF(p[i].device); Py_DECREF(p[i].config);
    Py_DECREF(p[i].site);
  }
}

// The pending entries appended to `launches` as tuples; -1 with an error set (those not made
// are lost). The array is taken off the slab first: an allocation here may run a collection,
// and a finalizer another thread, which may read `launches` too.
static int flush_pending(Slab *s) {
  SlabEntry *p = s->pending;
  Py_ssize_t n = s->n_pending, i = 0;
  s->pending = NULL, s->n_pending = s->cap_pending = 0;
  int rc = 0;
  PyObject *grid = NULL;  // the last one again while it repeats (as in a loop)
  for (; i < n && rc == 0; i++) {
    SlabEntry *e = &p[i];
    if (!grid || p[i - 1].gx != e->gx || p[i - 1].gy != e->gy || p[i - 1].gz != e->gz)
      Py_XSETREF(grid, Py_BuildValue("(LLL)", e->gx, e->gy, e->gz));
    PyObject *t = PyTuple_New(11);
    PyObject *made[4] = {PyLong_FromLongLong(e->seq), Py_XNewRef(grid), PyLong_FromLongLong(e->offset),
                         PyLong_FromLongLong(e->size)};
    if (!t || !made[0] || !made[1] || !made[2] || !made[3]) {
      Py_XDECREF(t);
      for (int j = 0; j < 4; j++) Py_XDECREF(made[j]);
      rc = -1;
      break;
    }
    // (the entry's references move into the tuple)
    PyObject *items[11] = {made[0], e->info, made[1], e->stream, e->device, e->config, Py_NewRef(Py_False),
                           e->site, made[2], made[3], Py_NewRef(Py_None)};
    for (int j = 0; j < 11; j++) PyTuple_SET_ITEM(t, j, items[j]);
    PyObject_GC_UnTrack(t);  // (no cycle; thousands of them until saved)
    rc = PyList_Append(s->launches, t);
    Py_DECREF(t);
  }
  Py_XDECREF(grid);
  drop_entries(p, i, n);  // (those not moved into a tuple: from the one that failed on)
  PyMem_Free(p);
  return rc;
}

static void Slab_dealloc(Slab *s) {
  drop_entries(s->pending, 0, s->n_pending);
  PyMem_Free(s->pending);
  Py_CLEAR(s->buf); Py_CLEAR(s->streams); Py_CLEAR(s->launches);
  Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *Slab_get_launches(Slab *s, void *closure) {
  (void)closure;
  if (flush_pending(s) < 0) return NULL;
  return Py_NewRef(s->launches);
}

static int Slab_set_launches(Slab *s, PyObject *v, void *closure) {
  (void)closure;
  if (!v || !PyList_Check(v)) {
    PyErr_SetString(PyExc_TypeError, "a slab's launches are a list");
    return -1;
  }
  drop_entries(s->pending, 0, s->n_pending);
  s->n_pending = 0;
  Py_SETREF(s->launches, Py_NewRef(v));
  return 0;
}

static PyGetSetDef Slab_getset[] = {{"launches", (getter)Slab_get_launches, (setter)Slab_set_launches, NULL, NULL},
                                    {NULL, NULL, NULL, NULL, NULL}};

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
  s->base = base, s->device = device, s->size = size, s->used = 0, s->opened = now_s(), s->last_stream = -1;
  if (!s->streams || !s->launches) {
    Py_DECREF(s);
    return NULL;
  }
  return (PyObject *)s;
}

#define FIELD(name, kind) MEMBER(Slab, name, kind, 0)
static PyMemberDef Slab_members[] = {
    FIELD(buf, T_OBJECT_EX) FIELD(streams, T_OBJECT_EX) FIELD(base, T_LONGLONG)
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
    .tp_getset = Slab_getset,
    .tp_doc = "A slab open for kept launches (collect/slabs.py's Slab, as C fields).",
};

static void Fast_dealloc(Fast *f) {
  PyObject **refs[] = {&f->path, &f->slabs, &f->lock, &f->open, &f->tls, &f->tool_state, &f->capturing,
                       &f->next_seq, &f->bracket_after, &f->is_library, &f->classify, &f->config_of,
                       &f->not_taken,
                       &f->s_active, &f->s_capturing,
                       &f->s_depth, &f->s_tuning, &f->s_measure, &f->s_autotuner, &f->s_not_kept,
                       &f->s_launch, &f->s_config, &f->s__depth, &f->s_dict, &f->s_self, &f->acquire, &f->release, &f->seq_iter,
                       &f->path_dict, &f->slabs_dict, &f->last_code, &f->last_site};
  for (size_t i = 0; i < sizeof(refs) / sizeof(refs[0]); i++) Py_CLEAR(*refs[i]);
  Py_TYPE(f)->tp_free((PyObject *)f);
}

// Fast(path, slabs, lock, open, tls, tool_state, capturing, next_seq, bracket_after, is_library,
//      classify, config_of, not_taken, first, every, total, largest, rate, started, ship_after,
//      stream_capturing)
// (stream_capturing: the driver function's address, or 0)
static PyObject *Fast_new(PyTypeObject *type, PyObject *a, PyObject *kw) {
  (void)kw;
  Fast *f = (Fast *)type->tp_alloc(type, 0);
  if (!f) return NULL;
  unsigned long long query = 0;
  if (!PyArg_ParseTuple(a, "OOOOOOOOOOOOOLLLLdddK", &f->path, &f->slabs, &f->lock, &f->open, &f->tls,
                        &f->tool_state, &f->capturing, &f->next_seq, &f->bracket_after, &f->is_library,
                        &f->classify, &f->config_of, &f->not_taken, &f->first, &f->every, &f->total,
                        &f->largest, &f->rate, &f->started, &f->ship_after, &query)) {
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
  NAME(s_active, "active")
  NAME(s_capturing, "capturing") NAME(s_depth, "depth") NAME(s_tuning, "tuning")
  NAME(s_measure, "measure") NAME(s_autotuner, "autotuner") NAME(s_not_kept, "not_kept")
  NAME(s_launch, "launch")
  NAME(s_config, "config") NAME(s__depth, "_depth") NAME(s_dict, "__dict__") NAME(s_self, "__self__")
#undef NAME
  f->c_lock = Py_IS_TYPE(f->lock, &RLockType) ? (RLock *)f->lock : NULL;
  f->stream_capturing = (int (*)(void *, int *))(uintptr_t)query;
  PyObject *it = NULL, *next = NULL;
  if (PyObject_GetOptionalAttr(f->next_seq, f->s_self, &it) < 0) goto fail;
  int same = it && PyIter_Check(it) && (next = PyObject_GetAttrString(it, "__next__")) &&
             PyObject_RichCompareBool(next, f->next_seq, Py_EQ) == 1;  // (itertools.count().__next__: its count)
  Py_XDECREF(next);
  PyErr_Clear();
  if (same) f->seq_iter = it;
  else Py_XDECREF(it);
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

static PyMemberDef Fast_members[] = {MEMBER(Fast, kept, T_LONGLONG, 0) MEMBER(Fast, sampled, T_LONGLONG, 0)
                                         MEMBER(Fast, started, T_DOUBLE, 0) {NULL, 0, 0, 0, NULL}};

static PyTypeObject FastType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proton_inject_fast_launch.Fast",
    .tp_basicsize = sizeof(Fast),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Fast_new,
    .tp_dealloc = (destructor)Fast_dealloc,
    .tp_members = Fast_members,
    .tp_doc = "A session's state for its C launchers' kept launches (collect/fast_launch.py).",
};


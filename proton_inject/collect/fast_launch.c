// Instrumented builds' launchers in C, compiled after fast_launch_state.c (its types and helpers).
// A launcher counts each launch, sends a launch not kept to Triton's entry point, and keeps the
// usual kept launch itself: the launch path's checks, the program's frame, the slab's bytes and
// the launch in one call, so that a kept launch costs about what a plain one does. Everything
// it does not handle (a build's first launches, a clock bracket due, a slab to open or ship, an
// autotuner, a capture, --measure-overhead, tool work, the total reached) goes to the Python
// launch path before anything changes; the Python path (collect/launch_path.py and
// collect/slabs.py) is the reference for each step.

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

// An instrumented build's launcher in C (launch_path.KernelLauncher's twin): Triton calls it as
// the build's `run`; its fields are the Python launcher's attributes.
typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;  // Launcher_call: Triton's call of it builds no tuple
  PyObject *inner, *info, *counts, *path, *device, *direct, *coop, *pdl, *discard, *fast;
  PyObject *plain_fn, *plain_meta;  // the plain twin's function and packed metadata, or NULL/None
  long long per_cta, discard_bytes;
} Launcher;

// Triton's C entry point of `w` with profile scratch `scratch` (argv as Triton calls `run`:
// gx, gy, gz, stream, function, packed metadata, then the rest); `fn` and `meta`, where not
// NULL, stand for argv's function and packed metadata (the plain twin's).
static PyObject *call_entry(Launcher *w, PyObject *const *argv, Py_ssize_t nargs, PyObject *stream,
                            PyObject *scratch, PyObject *fn, PyObject *meta) {
  PyObject *small[64], **call = small;
  Py_ssize_t n = 4 + nargs;  // (9 fixed, then argv[5:])
  if (n > 64 && !(call = PyMem_Malloc(sizeof(PyObject *) * (size_t)n))) return PyErr_NoMemory();
  PyObject *head[9] = {argv[0], argv[1], argv[2], stream, fn ? fn : argv[4], w->coop ? w->coop : Py_False,
                       w->pdl ? w->pdl : Py_False, Py_None, scratch};
  for (int i = 0; i < 9; i++) call[i] = head[i];
  for (Py_ssize_t i = 5; i < nargs; i++) call[4 + i] = argv[i];
  if (meta) call[9] = meta;  // (argv[5])
  PyObject *ret = PyObject_Vectorcall(w->direct, call, (size_t)n, NULL);
  if (call != small) PyMem_Free(call);
  return ret;
}

// The launch path's checks for the usual kept launch, cheapest first (LaunchPath.launch's and
// Slabs.launch's conditions): 1 with its record bytes in `size` and its config in `config` (a new
// reference), or 0 when the Python path takes it (an error of ours may be set).
static int usual_case(Fast *f, Launcher *w, PyObject *const *argv, double now, long long *size,
                      PyObject **config) {
  PyObject *v = NULL;
  if (PyDict_GetItemWithError(f->path_dict, f->s_active) != Py_True) return 0;
  if (dict_ll(f->path_dict, f->s_capturing) != 0) return 0;
  if (f->total >= 0 && f->kept >= f->total) return 0;
  if (PyErr_Occurred() || PyObject_GetOptionalAttr(f->tool_state, f->s_depth, &v) < 0) return 0;
  int busy = v && PyObject_IsTrue(v);  // the tool's own device work
  Py_XDECREF(v);
  if (busy) return 0;
  PyObject *here = PyObject_GetAttr(f->tls, f->s_dict);  // this thread's values (the class: defaults)
  int tuned = !here || !PyDict_Check(here) || set_in(here, f->s_tuning) != 0 || set_in(here, f->s_measure) != 0
                  ? -1
                  : set_in(here, f->s_autotuner);  // launched by an autotuner: its best config
  Py_XDECREF(here);
  if (tuned < 0 || !w->direct || w->direct == Py_None || !w->info || !w->device || !PyLong_Check(w->device))
    return 0;
  long long x = PyLong_AsLongLong(argv[0]), y = PyLong_AsLongLong(argv[1]), z = PyLong_AsLongLong(argv[2]);
  if (PyErr_Occurred() || x <= 0 || y <= 0 || z <= 0 || w->per_cta <= 0) return 0;
  long long n = x;  // (each product at most largest before the next factor: no overflow)
  if (n > f->largest || (n *= y) > f->largest || (n *= z) > f->largest || (n *= w->per_cta) > f->largest)
    return 0;  // a large launch: a buffer of its own
  PyObject *due = PyDict_GetItemWithError(f->bracket_after, w->device);  // borrowed
  if (!due || now >= PyFloat_AsDouble(due) || PyErr_Occurred()) return 0;  // a clock bracket due
  if (f->stream_capturing) {  // the launch's stream capturing a graph (by any API), or unknown
    unsigned long long s = argv[3] == Py_None ? 0 : PyLong_AsUnsignedLongLong(argv[3]);
    int status = 0;
    if (PyErr_Occurred() || f->stream_capturing((void *)(uintptr_t)s, &status) != 0 || status != 0) return 0;
  } else {  // (torch's: this thread's current stream)
    v = PyObject_CallNoArgs(f->capturing);
    int capturing = v != Py_False;
    Py_XDECREF(v);
    if (capturing) return 0;
  }
  PyObject *c = tuned ? NULL : PyObject_GetAttr(w->info, f->s_config);
  if (!c || c == Py_None) {  // (LaunchPath._config: cached per build and per config)
    Py_XDECREF(c);
    if (!(c = PyObject_CallFunctionObjArgs(f->config_of, w->info, Py_None, NULL))) return 0;
  }
  *size = n, *config = c;
  return 1;
}

// A kept launch's entry in its slab (SlabLaunch's fields), pending until read; never raises
// (an entry that cannot be held is lost).
static void add_entry(Launcher *w, Slab *sl, PyObject *const *argv, PyObject *seq, PyObject *stream,
                      PyObject *config, PyObject *site, long long offset, long long size) {
  if (sl->n_pending == sl->cap_pending) {
    Py_ssize_t cap = sl->cap_pending ? 2 * sl->cap_pending : 256;
    SlabEntry *more = PyMem_Realloc(sl->pending, sizeof(SlabEntry) * (size_t)cap);
    if (!more) return;
    sl->pending = more, sl->cap_pending = cap;
  }
  long long n = PyLong_AsLongLong(seq), x = PyLong_AsLongLong(argv[0]), y = PyLong_AsLongLong(argv[1]),
            z = PyLong_AsLongLong(argv[2]);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return;
  }
  SlabEntry *e = &sl->pending[sl->n_pending++];
  e->seq = n, e->gx = x, e->gy = y, e->gz = z, e->offset = offset, e->size = size;
  e->info = Py_NewRef(w->info), e->stream = Py_NewRef(stream), e->device = Py_NewRef(w->device);
  e->config = Py_NewRef(config), e->site = Py_NewRef(site);
}

// The usual kept launch (`seen`: its count, itself included): its bytes in the open slab, under
// the slabs' lock as Slabs.launch, and Triton's entry point with them. Triton's return value (or
// its error), or NOT_TAKEN before anything changed when the Python path takes it.
static PyObject *fast_keep(Fast *f, Launcher *w, PyObject *const *argv, Py_ssize_t nargs, long long seen) {
  PyObject *config = NULL, *slab = NULL, *site = NULL, *seq = NULL, *s0 = NULL, *address = NULL, *ret = NULL;
  long long size;
  int locked = 0;
  // The policy's next keep, as the Python path sets it first; a build's first launches are
  // bracketed (the Python path).
  set_next_keep(f, (Counts *)w->counts, seen);
  if (seen <= BRACKETED_FIRST) goto not_taken;
  double now = now_s();
  if (!usual_case(f, w, argv, now, &size, &config) || !(site = program_frame(f))) goto not_taken;

  if (f->c_lock) {
    rlock_take(f->c_lock);
  } else {
    PyObject *v = PyObject_CallNoArgs(f->acquire);
    if (!v) goto not_taken;
    Py_DECREF(v);
  }
  locked = 1;
  if (dict_ll(f->slabs_dict, f->s__depth) != 0) goto not_taken;  // a hook's launch inside one, or an error
  Slab *sl = (Slab *)PyDict_GetItemWithError(f->open, w->device);  // borrowed
  if (!sl || !Py_IS_TYPE(sl, &SlabType)) goto not_taken;  // none open (or Python's): the Python path
  slab = Py_NewRef((PyObject *)sl);
  long long used = sl->used, step = (size + ALIGN - 1) / ALIGN * ALIGN;
  if (sl->base <= 0 || used + step > sl->size || now - sl->opened > f->ship_after) goto not_taken;  // to ship
  PyObject *stream = argv[3];
  if (!(seq = f->seq_iter ? PyIter_Next(f->seq_iter) : PyObject_CallNoArgs(f->next_seq)) ||
      !(s0 = stream == Py_None ? PyLong_FromLong(0) : Py_NewRef(stream)) ||
      !(address = PyLong_FromLongLong(sl->base + used)))
    goto not_taken;
  long long sv = PyLong_AsLongLong(s0);  // (the same stream as the last kept launch's: in the set)
  if ((sv == -1 && PyErr_Occurred()) || ((sv != sl->last_stream || sv < 0) && PySet_Add(sl->streams, s0) < 0))
    goto not_taken;
  sl->last_stream = sv;
  if (dict_set_ll(f->slabs_dict, f->s__depth, 1) < 0) goto not_taken;  // (marked for the program's launch hooks)
  f->kept++;
  sl->used = used + step;

  ret = call_entry(w, argv, nargs, s0, address, NULL, NULL);
  held_error held = hold_error();  // (the program's error, if any, kept across the reset)
  dict_set_ll(f->slabs_dict, f->s__depth, 0);
  restore_error(held);
  if (ret) add_entry(w, sl, argv, seq, s0, config, site, used, size);
  goto done;

not_taken:
  PyErr_Clear();
  ret = Py_NewRef(f->not_taken);
done:
  if (locked) {  // (an error of the program's own launch is kept across the release)
    held_error held = hold_error();
    if (f->c_lock) {
      rlock_give(f->c_lock);
    } else {
      PyObject *r = PyObject_CallNoArgs(f->release);
      Py_XDECREF(r);
    }
    restore_error(held);
  }
  Py_XDECREF(config); Py_XDECREF(slab); Py_XDECREF(site); Py_XDECREF(seq); Py_XDECREF(s0); Py_XDECREF(address);
  return ret;
}

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
  Counts *counts = (Counts *)w->counts;  // (always the C counts: Launcher() takes no other)
  if (!count_launch(f, counts)) {
    long long capturing = dict_ll(f->path_dict, f->s_capturing);
    if (PyErr_Occurred()) goto plain;
    if (!capturing) {
      if (w->plain_fn && w->plain_fn != Py_None && w->plain_meta && w->direct && w->direct != Py_None && nargs > 5)
        return call_entry(w, argv, nargs, argv[3], Py_None, w->plain_fn, w->plain_meta);  // the plain twin
      long long x = PyLong_AsLongLong(argv[0]), y = PyLong_AsLongLong(argv[1]), z = PyLong_AsLongLong(argv[2]);
      if (PyErr_Occurred()) goto plain;
      long long need = x * y * z * w->per_cta;
      if (w->direct && w->direct != Py_None && w->discard && w->discard != Py_None && need <= w->discard_bytes)
        return call_entry(w, argv, nargs, argv[3], w->discard, NULL, NULL);
      return python_path(w, f->s_not_kept, argv, nargs);
    }
  }
  PyObject *ret = fast_keep(f, w, argv, nargs, counts->seen);
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
  Py_VISIT(w->plain_fn); Py_VISIT(w->plain_meta);
  return 0;
}

static int Launcher_clear(Launcher *w) {
  Py_CLEAR(w->inner); Py_CLEAR(w->info); Py_CLEAR(w->counts); Py_CLEAR(w->path); Py_CLEAR(w->device);
  Py_CLEAR(w->direct); Py_CLEAR(w->coop); Py_CLEAR(w->pdl); Py_CLEAR(w->discard); Py_CLEAR(w->fast);
  Py_CLEAR(w->plain_fn); Py_CLEAR(w->plain_meta);
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
  if (!PyArg_ParseTuple(a, "O!OOO!OOOOOL", &FastType, &fast, &inner, &info, &CountsType, &counts, &path,
                        &device, &direct, &coop, &pdl, &per_cta))
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

#define FIELD(name, kind) MEMBER(Launcher, name, kind, 0)
static PyMemberDef Launcher_members[] = {
    FIELD(inner, T_OBJECT_EX) FIELD(info, T_OBJECT_EX) MEMBER(Launcher, counts, T_OBJECT_EX, READONLY) FIELD(path, T_OBJECT_EX)
    FIELD(device, T_OBJECT_EX) FIELD(direct, T_OBJECT) FIELD(coop, T_OBJECT) FIELD(pdl, T_OBJECT)
    FIELD(discard, T_OBJECT) FIELD(fast, T_OBJECT) FIELD(per_cta, T_LONGLONG) FIELD(discard_bytes, T_LONGLONG)
    FIELD(plain_fn, T_OBJECT) FIELD(plain_meta, T_OBJECT)
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
      PyType_Ready(&CountsType) < 0 || PyType_Ready(&RLockType) < 0)
    return NULL;
  PyObject *m = PyModule_Create(&module);
  if (!m) return NULL;
  Py_INCREF(&FastType);
  Py_INCREF(&LauncherType);
  Py_INCREF(&SlabType);
  Py_INCREF(&CountsType);
  Py_INCREF(&RLockType);
  if (PyModule_AddObject(m, "Lock", (PyObject *)&RLockType) < 0 ||
      PyModule_AddObject(m, "Fast", (PyObject *)&FastType) < 0 ||
      PyModule_AddObject(m, "Launcher", (PyObject *)&LauncherType) < 0 ||
      PyModule_AddObject(m, "Slab", (PyObject *)&SlabType) < 0 ||
      PyModule_AddObject(m, "Counts", (PyObject *)&CountsType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}

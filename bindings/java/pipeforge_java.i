// Java: package org.pipeforge. The SWIG proxies (Model, Trainer, Tensor, TrainerOptions, MlpConfig,
// GptConfig, StepResult, Metrics, ProcessInfo, Schedule, ScheduleOptions, CostModel, Simulation,
// SimulationSummary, RankStats, PipeForge) are the public classes, with camelCase methods; the
// hand-written classes in src/org/pipeforge/ add DataLoader, Batch, PipeForgeException and the code
// that loads the JNI library (NativeLibrary, from the JNI class's static initialiser).
%module(directors="1") PipeForge

%{
#include <string>
#include <vector>

#include "bindings/pipeforge_core.h"

// Throws org.pipeforge.PipeForgeException(code, codeName, message) in the calling Java thread.
static void pf_java_throw(JNIEnv* jenv, int code, const std::string& message) {
  jclass cls = jenv->FindClass("org/pipeforge/PipeForgeException");
  if (cls == nullptr) return;  // NoClassDefFoundError is pending
  jmethodID ctor = jenv->GetMethodID(cls, "<init>", "(ILjava/lang/String;Ljava/lang/String;)V");
  if (ctor == nullptr) return;
  jstring name = jenv->NewStringUTF(pipeforge::code_name(code).c_str());
  jstring text = jenv->NewStringUTF(message.c_str());
  jobject exc = jenv->NewObject(cls, ctor, static_cast<jint>(code), name, text);
  if (exc != nullptr) jenv->Throw(static_cast<jthrowable>(exc));
}
%}

// Swig runs with -DSWIGWORDSIZE64, so int64_t is `long` as in the C++ compiler's headers; Java
// still needs it as a 64-bit jlong (SWIG maps C `long` to Java int).
%include <stdint.i>
%apply long long { int64_t };
%apply const long long& { const int64_t& };

// camelCase for Java: step_from_loader -> stepFromLoader, grad_norm -> getGradNorm().
%rename("%(lowercamelcase)s", %$isfunction) "";
%rename("%(lowercamelcase)s", %$isvariable) "";

// The JNI class is an implementation detail; it loads the library and checks the ABI first.
%pragma(java) jniclassclassmodifiers = "final class"
%pragma(java) jniclasscode = %{
  static {
    NativeLibrary.load();
  }
%}
%pragma(java) moduleclassmodifiers = "public final class"
%pragma(java) modulecode = %{
  private PipeForge() {}
%}

%exception {
  try {
    $action
  } catch (const pipeforge::Error& e) {
    pf_java_throw(jenv, e.code(), e.message());
    return $null;
  } catch (const std::bad_alloc&) {
    pf_java_throw(jenv, PF_OUT_OF_MEMORY, "out of memory in the Java binding");
    return $null;
  } catch (const std::exception& e) {
    pf_java_throw(jenv, PF_INTERNAL, e.what());
    return $null;
  }
}

// A method called on a closed (deleted) proxy throws instead of dereferencing NULL.
%typemap(check) SWIGTYPE* self %{
  if (!$1) {
    pf_java_throw(jenv, PF_FAILED_PRECONDITION, "$symname: the object is closed");
    return $null;
  }
%}

// ---- arrays -----------------------------------------------------------------------------------
// PF_JAVA_ARRAY(SIGNATURE, JNI_ELEMENT, JAVA_TYPE, JAVA_PARAMETER_TYPE, JNI_ARRAY, KIND, RELEASE):
// a Java array borrowed for the call: (pointer, count) in C++. RELEASE is JNI_ABORT for arrays the
// call only reads and 0 for arrays it fills (copied back).
%define PF_JAVA_ARRAY(SIGNATURE, JNI_ELEMENT, JAVA_TYPE, JAVA_PARAMETER_TYPE, JNI_ARRAY, KIND, RELEASE)
%typemap(jni) SIGNATURE #JNI_ARRAY
%typemap(jtype) SIGNATURE #JAVA_TYPE
%typemap(jstype) SIGNATURE #JAVA_PARAMETER_TYPE
%typemap(javain) SIGNATURE "$javainput"
%typemap(in) SIGNATURE {
  if ($input == nullptr) {
    SWIG_JavaThrowException(jenv, SWIG_JavaNullPointerException, "$1_name is null");
    return $null;
  }
  $1 = reinterpret_cast<decltype($1)>(jenv->Get##KIND##ArrayElements($input, nullptr));
  if ($1 == nullptr) return $null;
  $2 = static_cast<size_t>(jenv->GetArrayLength($input));
}
%typemap(freearg) SIGNATURE {
  if ($1 != nullptr) jenv->Release##KIND##ArrayElements($input, reinterpret_cast<JNI_ELEMENT*>($1), RELEASE);
}
%enddef

PF_JAVA_ARRAY((const float* data, size_t count), jfloat, float[], float[], jfloatArray, Float, JNI_ABORT)
PF_JAVA_ARRAY((const int32_t* data, size_t count), jint, int[], int[], jintArray, Int, JNI_ABORT)
PF_JAVA_ARRAY((const int64_t* shape, size_t ndim), jlong, long[], long..., jlongArray, Long, JNI_ABORT)
PF_JAVA_ARRAY((const int64_t* values, size_t count), jlong, long[], long..., jlongArray, Long, JNI_ABORT)
PF_JAVA_ARRAY((const double* values, size_t count), jdouble, double[], double..., jdoubleArray, Double, JNI_ABORT)
PF_JAVA_ARRAY((float* out, size_t count), jfloat, float[], float[], jfloatArray, Float, 0)
PF_JAVA_ARRAY((int32_t* out, size_t count), jint, int[], int[], jintArray, Int, 0)

%typemap(jni) std::vector<int64_t> "jlongArray"
%typemap(jtype) std::vector<int64_t> "long[]"
%typemap(jstype) std::vector<int64_t> "long[]"
%typemap(javaout) std::vector<int64_t> { return $jnicall; }
%typemap(out) std::vector<int64_t> {
  const std::vector<int64_t>& v = $1;
  $result = jenv->NewLongArray(static_cast<jsize>(v.size()));
  if ($result != nullptr && !v.empty()) {
    jenv->SetLongArrayRegion($result, 0, static_cast<jsize>(v.size()), reinterpret_cast<const jlong*>(v.data()));
  }
}

// ---- classes ----------------------------------------------------------------------------------
%typemap(javainterfaces) pipeforge::Model "AutoCloseable"
%typemap(javainterfaces) pipeforge::Trainer "AutoCloseable"

// close() frees the native object; a later call throws PipeForgeException (FAILED_PRECONDITION).
%ignore pipeforge::Model::close;
%ignore pipeforge::Model::closed;
%ignore pipeforge::Trainer::close;
%ignore pipeforge::Trainer::closed;

%typemap(javacode) pipeforge::Model %{
  /** Frees the native model (a trainer built on it keeps its own reference). Idempotent. */
  @Override
  public void close() {
    delete();
  }

  /** Parameter names in model order, e.g. "fc0.weight". */
  public String[] parameterNames() {
    String[] names = new String[(int) numParameters()];
    for (int i = 0; i < names.length; ++i) names[i] = parameterName(i);
    return names;
  }
%}

%typemap(javacode) pipeforge::Tensor %{
  /** A copy of the data of a float32 tensor. */
  public float[] floats() {
    float[] out = new float[(int) size()];
    copyFloats(out);
    return out;
  }

  /** A copy of the data of an int32 tensor. */
  public int[] ints() {
    int[] out = new int[(int) size()];
    copyInts(out);
    return out;
  }
%}

%rename(setDataLoaderNative) pipeforge::Trainer::set_data_loader;
%javamethodmodifiers pipeforge::Trainer::set_data_loader "private";
%rename(stepFromLoaderNative) pipeforge::Trainer::step_from_loader;
%javamethodmodifiers pipeforge::Trainer::step_from_loader "private";
%rename(getParameter) pipeforge::Trainer::parameter;
%rename(setEvalLoaderNative) pipeforge::Trainer::set_eval_loader;
%javamethodmodifiers pipeforge::Trainer::set_eval_loader "private";
%rename(evaluateNative) pipeforge::Trainer::evaluate;
%javamethodmodifiers pipeforge::Trainer::evaluate "private";
%rename(runNative) pipeforge::Trainer::run;
%javamethodmodifiers pipeforge::Trainer::run "private";
%rename(runWatchedNative) pipeforge::Trainer::run_watched;
%javamethodmodifiers pipeforge::Trainer::run_watched "private";
%javamethodmodifiers pipeforge::Trainer::create "private";
%typemap(javacode) pipeforge::Trainer %{
  // The bridge the runtime calls: referenced here so that it lives while it is installed.
  private LoaderBridge loaderBridge;

  /** Creates a trainer on {@code model} (which it retains) and initialises its parameters. */
  public Trainer(Model model, TrainerOptions options) {
    this(create(model, options));
  }

  private Trainer(Trainer created) {
    this(getCPtr(created), true);
    created.swigCMemOwn = false;  // this proxy owns the native trainer now
  }

  /**
   * Installs a data loader (null removes it). The runtime calls it on the thread that runs
   * {@link #stepFromLoader()}.
   */
  public void setDataLoader(DataLoader loader) {
    loaderBridge = install(loader, this::setDataLoaderNative, loaderBridge);
  }
  /** Hands {@code loader} (or none) to the runtime through {@code set}; returns its bridge. */
  private static LoaderBridge install(
      DataLoader loader, java.util.function.Consumer<LoaderCallback> set, LoaderBridge old) {
    LoaderBridge bridge = loader == null ? null : new LoaderBridge(loader);
    set.accept(bridge);
    if (old != null) old.delete();  // the runtime has let go of it
    return bridge;
  }

  private LoaderBridge evalLoaderBridge;
  /**
   * Installs the held-out loader that {@link #evaluate(int)} and {@link #run(RunOptions)} evaluate
   * on (null removes it); every evaluation reads its micro-batches from position 0.
   */
  public void setEvalLoader(DataLoader loader) {
    evalLoaderBridge = install(loader, this::setEvalLoaderNative, evalLoaderBridge);
  }
  /** Runs {@code call}; a loader's exception becomes the cause of the CALLBACK_ERROR it caused. */
  private <T> T withLoaders(java.util.function.Supplier<T> call) {
    LoaderBridge[] bridges = {loaderBridge, evalLoaderBridge};
    for (LoaderBridge b : bridges) if (b != null) b.lastError = null;
    try {
      return call.get();
    } catch (PipeForgeException e) {
      for (LoaderBridge b : bridges) {
        if (b != null && b.lastError != null && e.getCause() == null) e.initCause(b.lastError);
        if (b != null) b.lastError = null;
      }
      throw e;
    }
  }
  /**
   * One step on micro-batches from the data loader. If the loader threw, the PipeForgeException
   * (CALLBACK_ERROR) carries its class and message, and the exception itself as the cause.
   */
  public StepResult stepFromLoader() {
    return withLoaders(this::stepFromLoaderNative);
  }
  /** Forward-only over the eval loader's micro-batches 0 .. microBatches - 1: no gradient, no update. */
  public EvalResult evaluate(int microBatches) {
    return withLoaders(() -> evaluateNative(microBatches));
  }
  /**
   * The training loop: steps from the data loader with evaluation, periodic checkpoints and a
   * JSON Lines metrics log as {@code options} asks (loadCheckpoint(checkpointDir) resumes from the
   * newest checkpoint).
   */
  public RunResult run(RunOptions options) {
    return run(options, null);
  }
  /**
   * {@link #run(RunOptions)} watched by {@code onStep} (null: none) after every step. Ctrl-C or
   * SIGTERM while it runs (the JVM shutting down) ends the run after the step in progress, with its
   * checkpoint written as for the last step, before the JVM exits. Throws what onStep threw, and
   * TrainingDivergedException when a step diverged (a NaN or infinity in its loss, gradient norm or
   * a parameter after the update).
   */
  public RunResult run(RunOptions options, StepListener onStep) {
    StepBridge bridge = new StepBridge(onStep);
    java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(1);
    Thread hook = new Thread(() -> {
      bridge.stopRequested = true;
      try {
        done.await();  // the step in progress and its checkpoint finish before the JVM halts
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }, "pipeforge-run-shutdown");
    Runtime.getRuntime().addShutdownHook(hook);
    RunResult result;
    try {
      result = withLoaders(() -> runWatchedNative(options, bridge));
    } finally {
      done.countDown();
      try {
        Runtime.getRuntime().removeShutdownHook(hook);
      } catch (IllegalStateException shuttingDown) {
        // the hook runs now and returns at once
      }
      bridge.delete();
    }
    if (bridge.error instanceof RuntimeException) throw (RuntimeException) bridge.error;
    if (bridge.error instanceof Error) throw (Error) bridge.error;
    if (bridge.error != null) throw new RuntimeException("the step listener threw", bridge.error);
    if (result.getDiverged()) throw new TrainingDivergedException(result);
    return result;
  }

  /**
   * Writes the model and its current weights as a Hugging Face Transformers folder ({@code
   * config.json}, {@code model.safetensors}) with LlamaForCausalLM's names ("hf-llama"); since 0.17.
   * {@link #loadHfWeights(String)} and {@link Model#fromHf(String)} read it back.
   */
  public void exportHf(String dir) {
    exportHf(dir, "hf-llama");
  }

  /**
   * Every rank's statistics over the last step of a pipelined trainer, rank 0 first (microseconds
   * from the step start). Throws PipeForgeException (FAILED_PRECONDITION) for the sequential
   * trainer or before the first step.
   */
  public RankStats[] rankStats() {
    RankStats[] ranks = new RankStats[numRanks()];
    for (int i = 0; i < ranks.length; ++i) ranks[i] = rankStats(i);
    return ranks;
  }

  /** Destroys the native trainer and its data loader. Idempotent. */
  @Override
  public synchronized void close() {
    delete();
    if (loaderBridge != null) {
      loaderBridge.delete();
      loaderBridge = null;
    }
    if (evalLoaderBridge != null) {
      evalLoaderBridge.delete();
      evalLoaderBridge = null;
    }
  }
%}

// Pipelined training: new TrainerOptions().setSchedule("1f1b") with setStages(2) (setScheduleText,
// setChunks, setLayersPerStage, setRecvTimeoutSeconds; activation memory: setActivationPolicy,
// setActivationBudgetBytes, setOffloadDir; where to train: setDevices("cpu" / "cuda:0" / one per rank,
// comma-separated); one process per rank under mpirun: setProcesses("auto" / "threads" / "mpi"),
// setDataParallel, setGradientReduction("allreduce" / "deterministic"), setRanks (= setStages);
// asynchronous schedules ("pipedream", "pipedream-2bw", "spectrain", "pipemare"): setVerticalSync,
// setSpectrainVersion, setPipemareAnnealUpdates (0 = no annealing), setPipemareDecay; local
// learning ("ppll", "local-updates"): setLocalHead("auto" / "linear" / "layernorm-linear" /
// "mlp"); the learning-rate schedule: setLrSchedule("constant" / "cosine" / "linear"),
// setWarmupSteps, setDecaySteps, setMinLr; sequence-sliced 1F1B, since 0.7: setSeqSlices(S) with
// schedule "seq1f1b"; fail-slow adaptation, since 0.9: setAdapt(true), setAdaptThreshold,
// setAdaptPatience, and the test knobs setSlowRank, setSlowFactor; Trainer.adaptationsJson()
// lists the moves); the setters return nothing, as SWIG makes them. The
// training loop: setBuiltinData / setBuiltinEvalData (a DataOptions: "char_text", "synthetic",
// "csv", since 0.17 "token_file" with setPath and setVocab, since 0.18 "cifar10" with setPath: a
// CIFAR-10 .bin file or the cifar-10-batches-bin folder; PipeForge.builtinDataInfo says what a
// model for it needs), setEvalLoader, evaluate(n),
// run(RunOptions), partition(); Model.partitionBalanced(inputs, targets, stages), since 0.10
// Model.partitionByParameters(stages). Hugging Face Transformers folders, since 0.17:
// Model.fromHf(dir), Trainer.loadHfWeights(dir), Trainer.exportHf(dir[, "hf-llama" | "hf-gpt2"]).
// Trainer.process() gives the launch rank
// and size, RankStats.getLocal() whether this process ran the rank; Trainer.drain() finishes the
// micro-batches an asynchronous or local-learning schedule left in flight (call it before reading
// the final parameters; a no-op otherwise).
%typemap(javacode) pipeforge::TrainerOptions %{
  /** The defaults, pipelined with schedule {@code name} over {@code stages} ranks. */
  public static TrainerOptions pipelined(String name, int stages) {
    TrainerOptions options = new TrainerOptions();
    options.setSchedule(name);
    options.setStages(stages);
    return options;
  }

  /** Top-level layers per stage (one entry per stage), instead of the default split (balanced parameter counts). */
  public void setLayersPerStage(int... layers) {
    long[] values = new long[layers.length];
    for (int i = 0; i < layers.length; ++i) values[i] = layers[i];
    setLayersPerStage(values);
  }
%}

// ---- schedules --------------------------------------------------------------------------------
%typemap(javainterfaces) pipeforge::Schedule "AutoCloseable"
%typemap(javainterfaces) pipeforge::Simulation "AutoCloseable"
%ignore pipeforge::Schedule::close;
%ignore pipeforge::Schedule::closed;
%ignore pipeforge::Simulation::close;
%ignore pipeforge::Simulation::closed;

// validate(String comm) and simulate(CostModel, String comm) in Java: overloads of validate() and
// simulate(CostModel) (the core names them apart for Go).
%rename(validate) pipeforge::Schedule::validate_comm;
%rename(simulate) pipeforge::Schedule::simulate_comm;

%typemap(javacode) pipeforge::ScheduleOptions %{
  /** P pipeline ranks (stages) and M micro-batches; the rest takes the defaults (1 chunk). */
  public ScheduleOptions(int stages, int microBatches) {
    this();
    setStages(stages);
    setMicroBatches(microBatches);
  }
%}

%typemap(javacode) pipeforge::Schedule %{
  /** Generates schedule {@code name} for {@code stages} ranks and {@code microBatches} micro-batches. */
  public static Schedule generate(String name, int stages, int microBatches) {
    return generate(name, new ScheduleOptions(stages, microBatches));
  }

  /** Simulates under the default costs (t_f = t_b = t_w = 1, no communication latency, m_b = 1). */
  public Simulation simulate() {
    return simulate(new CostModel());
  }

  /**
   * Simulates under the default costs with send/recv semantics {@code comm} (one of {@link
   * #COMM_SEMANTICS}).
   */
  public Simulation simulate(String comm) {
    return simulate(new CostModel(), comm);
  }

  /**
   * What a SEND/RECV pair means, for {@link #validate(String)} and {@link #simulate(CostModel,
   * String)}: "rendezvous" (both block until the other is reached; what validate() and
   * simulate(CostModel) use) or "posted" (MPI isend/irecv, NCCL, PyTorch: a SEND never blocks, only
   * the compute that consumes a RECV's tensor waits for it).
   */
  public static final String[] COMM_SEMANTICS = {"rendezvous", "posted"};

  /** The compute-only PyTorch CSV (no SEND/RECV). */
  public String toPytorchCsv() {
    return toPytorchCsv(false);
  }

  /** The activation policies {@link #applyActivationPolicy} and TrainerOptions.setActivationPolicy know. */
  public static final String[] ACTIVATION_POLICIES = {
    "none", "recompute", "offload-host", "offload-file", "selective", "balance"
  };

  /** {@code policy} applied under {@code costs}, without a budget (every policy but "selective"). */
  public Schedule applyActivationPolicy(String policy, CostModel costs) {
    return applyActivationPolicy(policy, costs, 0.0);
  }

  /** {@code policy} applied under the default costs, without a budget. */
  public Schedule applyActivationPolicy(String policy) {
    return applyActivationPolicy(policy, new CostModel(), 0.0);
  }

  /** The smallest per-rank budget "selective" can meet under the default costs. */
  public double minActivationBudget() {
    return minActivationBudget(new CostModel());
  }

  /** Frees the native schedule (its simulations stay valid). Idempotent. */
  @Override
  public void close() {
    delete();
  }
%}

%typemap(javacode) pipeforge::Simulation %{
  public double makespan() {
    return summary().getMakespan();
  }

  public double ideal() {
    return summary().getIdeal();
  }

  public double bubbleRate() {
    return summary().getBubbleRate();
  }

  public double maxSpan() {
    return summary().getMaxSpan();
  }

  public double spanBubbleRate() {
    return summary().getSpanBubbleRate();
  }

  public int numRanks() {
    return summary().getNumRanks();
  }

  /** Every rank's statistics, rank 0 first. */
  public RankStats[] ranks() {
    RankStats[] ranks = new RankStats[summary().getNumRanks()];
    for (int i = 0; i < ranks.length; ++i) ranks[i] = rankStats(i);
    return ranks;
  }

  /** A terminal grid 100 characters wide. */
  public String toAscii() {
    return toAscii(100);
  }

  /** Frees the native simulation. Idempotent. */
  @Override
  public void close() {
    delete();
  }
%}

// ---- linear models -----------------------------------------------------------------------------
%typemap(javainterfaces) pipeforge::GlmModel "AutoCloseable"
%ignore pipeforge::GlmModel::close;
%ignore pipeforge::GlmModel::closed;
%typemap(javacode) pipeforge::GlmModel %{
  /** Frees the native model. Idempotent. */
  @Override
  public void close() {
    delete();
  }
%}

// ---- planning ---------------------------------------------------------------------------------
%typemap(javainterfaces) pipeforge::Plan "AutoCloseable"
%ignore pipeforge::Plan::close;
%ignore pipeforge::Plan::closed;
%javamethodmodifiers pipeforge::Plan::create "private";
%typemap(javacode) pipeforge::Plan %{
  /**
   * Plans how to train {@code model} (on a copy) from one step's batch {@code inputs}, {@code
   * targets} (all replicas' rows), with the optimizer of {@code trainerOptions} (docs/PLANNING.md).
   */
  public Plan(Model model, Tensor inputs, Tensor targets, TrainerOptions trainerOptions, PlanOptions options) {
    this(create(model, inputs, targets, trainerOptions, options));
  }

  private Plan(Plan created) {
    this(getCPtr(created), true);
    created.swigCMemOwn = false;  // this proxy owns the native plan now
  }

  /** Frees the native plan. Idempotent. */
  @Override
  public void close() {
    delete();
  }
%}

// Implementation details of the data-loader bridge.
%typemap(javaclassmodifiers) pipeforge::LoaderCallback "abstract class"
%typemap(javaclassmodifiers) pipeforge::StepCallback "abstract class"
%typemap(javaclassmodifiers) pipeforge::MicroBatch "final class"
%javamethodmodifiers pipeforge::MicroBatch::MicroBatch "";
%ignore pipeforge::MicroBatch::clear;
%ignore pipeforge::Tensor::defined;

%include "enums.swg"
// Go's forms of partition and partition_balanced (this language takes the returned vector).
%ignore pipeforge::Trainer::partition_into;
%ignore pipeforge::Model::partition_balanced_into;
%ignore pipeforge::Model::partition_by_parameters_into;
%include "bindings/pipeforge.i"

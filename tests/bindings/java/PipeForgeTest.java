package org.pipeforge.test;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotEquals;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.BeforeClass;
import org.junit.Test;
import org.pipeforge.Batch;
import org.pipeforge.CostModel;
import org.pipeforge.DataInfo;
import org.pipeforge.DataLoader;
import org.pipeforge.DataOptions;
import org.pipeforge.EvalResult;
import org.pipeforge.GlmData;
import org.pipeforge.GlmModel;
import org.pipeforge.GlmOptions;
import org.pipeforge.GlmResult;
import org.pipeforge.GptConfig;
import org.pipeforge.MlpConfig;
import org.pipeforge.Model;
import org.pipeforge.PipeForge;
import org.pipeforge.PipeForgeException;
import org.pipeforge.Plan;
import org.pipeforge.PlanOptions;
import org.pipeforge.ProcessInfo;
import org.pipeforge.RankStats;
import org.pipeforge.RunOptions;
import org.pipeforge.RunResult;
import org.pipeforge.Schedule;
import org.pipeforge.ScheduleOptions;
import org.pipeforge.Simulation;
import org.pipeforge.StepResult;
import org.pipeforge.Tensor;
import org.pipeforge.Trainer;
import org.pipeforge.TrainerOptions;

/**
 * Tests of the Java binding. The system property {@code pipeforge.reference} names the
 * reference_loss program (the reference run through the C API, tests/bindings/reference_loss.c),
 * whose losses and checksum the binding must reproduce bit for bit.
 */
public class PipeForgeTest {
  static final int FEATURES = 8, CLASSES = 4, ROWS = 8, MICRO_BATCHES = 2, STEPS = 3;

  static List<String> referenceLosses = new ArrayList<>();
  static String referenceChecksum;

  @BeforeClass
  public static void runReference() throws Exception {
    Process p = new ProcessBuilder(System.getProperty("pipeforge.reference")).start();
    try (BufferedReader r =
        new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
      for (String line; (line = r.readLine()) != null; ) {
        String[] w = line.split(" ");
        if (w[0].equals("step")) referenceLosses.add(w[3] + " " + w[5]);
        if (w[0].equals("checksum")) referenceChecksum = w[1];
      }
    }
    assertEquals(0, p.waitFor());
    assertEquals(STEPS, referenceLosses.size());
  }

  // ---- the reference run (see reference_loss.c) ----

  static long mix(long z) {
    z += 0x9e3779b97f4a7c15L;
    z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
    z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
    return z ^ (z >>> 31);
  }

  /** Rows [first, first + rows) of batch {@code step}. */
  static Batch rows(long step, int first, int rows) {
    float[] x = new float[rows * FEATURES];
    int[] y = new int[rows];
    for (int i = 0; i < rows; ++i) {
      long r = first + i;
      for (int f = 0; f < FEATURES; ++f) {
        x[i * FEATURES + f] =
            (float) (Long.remainderUnsigned(mix(step * 1000003L + r * 101L + f), 2001L) - 1000) / 1024.0f;
      }
      y[i] = (int) Long.remainderUnsigned(mix(step * 7919L + r + 1000000007L), CLASSES);
    }
    return new Batch(Tensor.fromFloats(x, rows, FEATURES), Tensor.fromInts(y, rows));
  }

  static Batch microBatch(long position) {
    int half = ROWS / MICRO_BATCHES;
    return rows(position / MICRO_BATCHES, (int) (position % MICRO_BATCHES) * half, half);
  }

  static Model referenceModel() {
    MlpConfig config = new MlpConfig();
    config.setInputDim(FEATURES);
    config.setHidden(16, 16);
    config.setClasses(CLASSES);
    config.setActivation("relu");
    return Model.mlp(config);
  }

  static Trainer referenceTrainer(Model model) {
    TrainerOptions options = new TrainerOptions();
    options.setMicroBatches(MICRO_BATCHES);
    options.setSeed(42);
    options.setOptimizer("adamw");
    options.setLr(0.01f);
    options.setClipNorm(1.0f);
    return new Trainer(model, options);
  }

  static String bits(StepResult r) {
    return String.format(
        "%016x %016x", Double.doubleToRawLongBits(r.getLoss()), Double.doubleToRawLongBits(r.getGradNorm()));
  }

  void assertMatchesReference(List<String> losses, Trainer trainer) {
    assertEquals(referenceLosses, losses);
    assertEquals(referenceChecksum, trainer.checksum());
  }

  @Test
  public void stepMatchesTheCApiBitwise() {
    try (Model model = referenceModel(); Trainer trainer = referenceTrainer(model)) {
      List<String> losses = new ArrayList<>();
      for (int s = 0; s < STEPS; ++s) {
        Batch b = rows(s, 0, ROWS);
        losses.add(bits(trainer.step(b.inputs(), b.targets())));
      }
      assertMatchesReference(losses, trainer);
      assertEquals(STEPS, trainer.metrics().getStep());
    }
  }

  @Test
  public void dataLoaderMatchesTheCApiBitwise() {
    try (Model model = referenceModel(); Trainer trainer = referenceTrainer(model)) {
      trainer.setDataLoader(PipeForgeTest::microBatch);
      System.gc(); // the trainer keeps the loader alive
      List<String> losses = new ArrayList<>();
      for (int s = 0; s < STEPS; ++s) losses.add(bits(trainer.stepFromLoader()));
      assertMatchesReference(losses, trainer);
      assertEquals(STEPS * MICRO_BATCHES, trainer.metrics().getDataPosition());
    }
  }

  @Test
  public void failingLoaderSurfacesItsExceptionAndTheStepCanBeRetried() {
    final int[] failures = {0};
    DataLoader loader =
        position -> {
          if (position == 3 && failures[0]++ == 0) throw new IOException("shard 3 is unreadable");
          return microBatch(position);
        };
    try (Model model = referenceModel(); Trainer trainer = referenceTrainer(model)) {
      trainer.setDataLoader(loader);
      List<String> losses = new ArrayList<>();
      losses.add(bits(trainer.stepFromLoader()));
      PipeForgeException e = assertThrows(PipeForgeException.class, trainer::stepFromLoader);
      assertEquals(PipeForgeException.CALLBACK_ERROR, e.getCode());
      assertEquals("CALLBACK_ERROR", e.getCodeName());
      assertTrue(e.getMessage(), e.getMessage().contains("java.io.IOException: shard 3 is unreadable"));
      assertTrue(e.getCause() instanceof IOException);
      assertEquals(1, trainer.metrics().getStep()); // unchanged
      for (int s = 1; s < STEPS; ++s) losses.add(bits(trainer.stepFromLoader())); // the retry works
      assertMatchesReference(losses, trainer);
    }
  }

  @Test
  public void loaderReturningNothingIsAnError() {
    try (Model model = referenceModel(); Trainer trainer = referenceTrainer(model)) {
      trainer.setDataLoader(position -> null);
      PipeForgeException e = assertThrows(PipeForgeException.class, trainer::stepFromLoader);
      assertEquals(PipeForgeException.CALLBACK_ERROR, e.getCode());
      assertNull(e.getCause());
      trainer.setDataLoader(null);
      e = assertThrows(PipeForgeException.class, trainer::stepFromLoader);
      assertEquals(PipeForgeException.FAILED_PRECONDITION, e.getCode());
    }
  }

  @Test
  public void badJsonThrowsWithTheMessage() {
    PipeForgeException e = assertThrows(PipeForgeException.class, () -> Model.fromJson("{\"layers\": ["));
    assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    assertTrue(e.getMessage(), e.getMessage().contains("malformed"));
  }

  @Test
  public void misuseThrows() {
    Model model = referenceModel();
    Trainer trainer = referenceTrainer(model);
    Batch b = rows(0, 0, ROWS);
    PipeForgeException e =
        assertThrows(PipeForgeException.class, () -> trainer.step(b.targets(), b.inputs()));
    assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    e = assertThrows(PipeForgeException.class, () -> trainer.getParameter("nope.weight"));
    assertEquals(PipeForgeException.NOT_FOUND, e.getCode());
    assertThrows(NullPointerException.class, () -> trainer.step(null, b.targets()));
    assertThrows(PipeForgeException.class, () -> Tensor.fromFloats(new float[3], 2, 2));
    TrainerOptions bad = new TrainerOptions();
    bad.setOptimizer("adam");
    e = assertThrows(PipeForgeException.class, () -> new Trainer(referenceModel(), bad));
    assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    e = assertThrows(PipeForgeException.class, () -> new Trainer(model, new TrainerOptions()));
    assertEquals(PipeForgeException.FAILED_PRECONDITION, e.getCode()); // one live trainer per model
    trainer.close();
    trainer.close(); // idempotent
    e = assertThrows(PipeForgeException.class, () -> trainer.step(b.inputs(), b.targets()));
    assertEquals(PipeForgeException.FAILED_PRECONDITION, e.getCode());
    model.close();
    assertThrows(PipeForgeException.class, model::toJson);
  }

  @Test
  public void parametersAndCheckpoints() throws Exception {
    File folder = Files.createTempDirectory("pipeforge").toFile();
    try (Model model = referenceModel(); Trainer trainer = referenceTrainer(model)) {
      assertArrayEquals(
          new String[] {"fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias", "head.weight", "head.bias"},
          model.parameterNames());
      Batch b = rows(0, 0, ROWS);
      trainer.step(b.inputs(), b.targets());
      Tensor weight = trainer.getParameter("fc0.weight");
      assertArrayEquals(new long[] {16, FEATURES}, weight.shape());
      String path = new File(folder, "ckpt").getPath();
      trainer.saveCheckpoint(path);
      String saved = trainer.checksum();
      trainer.setParameter("fc0.weight", Tensor.fromFloats(new float[16 * FEATURES], 16, FEATURES));
      assertNotEquals(saved, trainer.checksum());
      trainer.loadCheckpoint(path);
      assertEquals(saved, trainer.checksum());
      assertArrayEquals(weight.floats(), trainer.getParameter("fc0.weight").floats(), 0.0f);
      String json = model.toJson();
      try (Model again = Model.fromJson(json)) {
        assertArrayEquals(model.parameterNames(), again.parameterNames());
      }
    }
  }

  // ---- Hugging Face Transformers folders and token files (C API 0.17) ----

  static final String LLAMA =
      "{\"preset\": \"llama\", \"vocab\": 20, \"seq_len\": 8, \"d_model\": 16, \"heads\": 4,"
          + " \"kv_heads\": 2, \"layers\": %d, \"mlp_hidden\": 24}";

  /** A nanoGPT token file (uint16 little-endian, no header) of {@code count} tokens i % 20. */
  static String tokenFile(File folder, int count) throws IOException {
    byte[] bytes = new byte[2 * count];
    for (int i = 0; i < count; ++i) bytes[2 * i] = (byte) (i % 20);
    File file = new File(folder, "train.bin");
    Files.write(file.toPath(), bytes);
    return file.getPath();
  }

  static DataOptions tokens(String path, long vocab) {
    DataOptions d = new DataOptions();
    d.setKind("token_file");
    d.setPath(path);
    d.setVocab(vocab);
    d.setRows(2);
    d.setSeqLen(8);
    d.setSeed(1);
    return d;
  }

  @Test
  public void aLlamaTrainedOnATokenFileComesBackFromItsTransformersFolder() throws Exception {
    File folder = Files.createTempDirectory("pipeforge_java_hf").toFile();
    String path = tokenFile(folder, 200);
    DataInfo info = PipeForge.builtinDataInfo(tokens(path, 20));
    assertEquals(20, info.getVocabSize());
    assertEquals(8, info.getSeqLen());
    String hf = new File(folder, "hf").getPath();
    Map<String, float[]> expected = new LinkedHashMap<>();
    String checksum;
    TrainerOptions options = new TrainerOptions();
    options.setMicroBatches(2);
    options.setSeed(7);
    options.setLr(0.01f);
    try (Model model = Model.fromJson(String.format(LLAMA, 2));
        Trainer trained = new Trainer(model, options)) {
      trained.setBuiltinData(tokens(path, 20));
      for (int s = 0; s < 2; ++s) assertTrue(Double.isFinite(trained.stepFromLoader().getLoss()));
      trained.exportHf(hf);
      for (String name : model.parameterNames()) expected.put(name, trained.getParameter(name).floats());
      checksum = trained.checksum();
    }
    assertTrue(new File(hf, "config.json").isFile());
    TrainerOptions pipelined = TrainerOptions.pipelined("1f1b", 2);
    pipelined.setSeed(99);
    try (Model restored = Model.fromHf(hf); Trainer loaded = new Trainer(restored, pipelined)) {
      assertArrayEquals(expected.keySet().toArray(new String[0]), restored.parameterNames());
      assertNotEquals(checksum, loaded.checksum());
      loaded.loadHfWeights(hf);
      assertEquals(checksum, loaded.checksum());
      for (Map.Entry<String, float[]> e : expected.entrySet())
        assertArrayEquals(e.getKey(), e.getValue(), loaded.getParameter(e.getKey()).floats(), 0.0f);
    }
  }

  @Test
  public void transformersFoldersAndTokenFilesThatDoNotFitAreRefused() throws Exception {
    File folder = Files.createTempDirectory("pipeforge_java_hf_bad").toFile();
    String small = new File(folder, "small").getPath();
    try (Model oneBlock = Model.fromJson(String.format(LLAMA, 1));
        Trainer t = new Trainer(oneBlock, new TrainerOptions())) {
      t.exportHf(small, "hf-llama");
      PipeForgeException e = assertThrows(PipeForgeException.class, () -> t.exportHf(small, "hf-bert"));
      assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
      assertTrue(e.getMessage(), e.getMessage().contains("unknown names 'hf-bert'"));
    }
    TrainerOptions options = new TrainerOptions();
    options.setMicroBatches(1);
    try (Model model = Model.fromJson(String.format(LLAMA, 2)); Trainer trainer = new Trainer(model, options)) {
      String before = trainer.checksum();
      PipeForgeException e = assertThrows(PipeForgeException.class, () -> trainer.loadHfWeights(small));
      assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
      assertTrue(e.getMessage(), e.getMessage().contains("model.layers.1."));
      assertEquals(before, trainer.checksum());
      // Tokens i % 20 against a vocabulary of 5 (every window of 9 holds one >= 5): the step fails,
      // changing nothing.
      trainer.setBuiltinData(tokens(tokenFile(folder, 200), 5));
      e = assertThrows(PipeForgeException.class, trainer::stepFromLoader);
      assertEquals(PipeForgeException.CALLBACK_ERROR, e.getCode());
      assertTrue(e.getMessage(), e.getMessage().contains("outside the model's vocabulary of 5"));
      assertEquals(before, trainer.checksum());
    }
    PipeForgeException e =
        assertThrows(PipeForgeException.class, () -> PipeForge.builtinDataInfo(tokens(small, 0)));
    assertTrue(e.getMessage(), e.getMessage().contains("options->vocab is 0"));
    e = assertThrows(PipeForgeException.class, () -> Model.fromHf(new File(folder, "missing").getPath()));
    assertEquals(PipeForgeException.NOT_FOUND, e.getCode());
  }

  // ---- CIFAR-10 images (C API 0.18) ----

  /** CIFAR-10 records with these ids: a label byte (id % 10), 3072 pixel bytes ((id + k) % 256). */
  static String cifar10File(File folder, String name, int... ids) throws IOException {
    byte[] bytes = new byte[3073 * ids.length];
    for (int r = 0; r < ids.length; ++r) {
      bytes[3073 * r] = (byte) (ids[r] % 10);
      for (int k = 0; k < 3072; ++k) bytes[3073 * r + 1 + k] = (byte) ((ids[r] + k) % 256);
    }
    File file = new File(folder, name);
    Files.write(file.toPath(), bytes);
    return file.getPath();
  }

  static DataOptions cifar10(String path, boolean heldOut) {
    DataOptions d = new DataOptions();
    d.setKind("cifar10");
    d.setPath(path);
    d.setRows(2);
    d.setHeldOut(heldOut);
    return d;
  }

  static Model cifar10Mlp() {
    MlpConfig config = new MlpConfig();
    config.setInputDim(3072);
    config.setHidden(8);
    config.setClasses(10);
    return Model.mlp(config);
  }

  @Test
  public void aCifar10FolderTrainsAnMlpAndDamageIsRefused() throws Exception {
    File folder = Files.createTempDirectory("pipeforge_java_cifar10").toFile();
    for (int n = 1; n <= 5; ++n) cifar10File(folder, "data_batch_" + n + ".bin", 10 * n, 10 * n + 1);
    cifar10File(folder, "test_batch.bin", 100, 101, 102);
    DataInfo info = PipeForge.builtinDataInfo(cifar10(folder.getPath(), false));
    assertEquals(3072, info.getFeatures());
    assertEquals(10, info.getClasses());
    TrainerOptions options = new TrainerOptions();
    options.setMicroBatches(2);
    options.setSeed(7);
    options.setLr(0.01f);
    try (Model model = cifar10Mlp(); Trainer trainer = new Trainer(model, options)) {
      trainer.setBuiltinData(cifar10(folder.getPath(), false));
      trainer.setBuiltinEvalData(cifar10(folder.getPath(), true));
      assertTrue(Double.isFinite(trainer.stepFromLoader().getLoss()));
      EvalResult e = trainer.evaluate(2);  // test_batch.bin: 2 images, then the remainder
      assertEquals(3, e.getSamples());
      assertTrue(Double.isFinite(e.getLoss()));
    }
    String bad = cifar10File(folder, "bad.bin", 1, 2);
    try (java.io.RandomAccessFile f = new java.io.RandomAccessFile(bad, "rw")) {
      f.seek(3073);
      f.write(10);  // record 1's label
    }
    TrainerOptions one = new TrainerOptions();
    one.setMicroBatches(1);
    try (Model model = cifar10Mlp(); Trainer trainer = new Trainer(model, one)) {
      String before = trainer.checksum();
      trainer.setBuiltinData(cifar10(bad, false));
      PipeForgeException e = assertThrows(PipeForgeException.class, trainer::stepFromLoader);
      assertEquals(PipeForgeException.CALLBACK_ERROR, e.getCode());
      assertTrue(e.getMessage(), e.getMessage().contains("record 1 (counting from 0) has label 10"));
      assertEquals(before, trainer.checksum());
    }
    String cut = new File(folder, "cut.bin").getPath();
    Files.write(new File(cut).toPath(), new byte[3073 + 5]);
    PipeForgeException e =
        assertThrows(PipeForgeException.class, () -> PipeForge.builtinDataInfo(cifar10(cut, false)));
    assertEquals(PipeForgeException.DATA_LOSS, e.getCode());
    assertTrue(e.getMessage(), e.getMessage().contains("cut.bin' holds 3078 bytes"));
    assertTrue(new File(folder, "test_batch.bin").delete());
    e = assertThrows(PipeForgeException.class, () -> PipeForge.builtinDataInfo(cifar10(folder.getPath(), false)));
    assertEquals(PipeForgeException.NOT_FOUND, e.getCode());
    assertTrue(e.getMessage(), e.getMessage().contains("test_batch.bin"));
  }

  // ---- pipelined training ----

  /** The C API's run (reference_loss ARGS...): losses, checksum and, pipelined, "ranks N bubble_rate_ok B". */
  static List<String> runReference(String... args) throws Exception {
    List<String> command = new ArrayList<>();
    command.add(System.getProperty("pipeforge.reference"));
    command.addAll(List.of(args));
    Process p = new ProcessBuilder(command).start();
    List<String> out = new ArrayList<>();
    try (BufferedReader r =
        new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
      for (String line; (line = r.readLine()) != null; ) {
        String[] w = line.split(" ");
        if (w[0].equals("step")) out.add(w[3] + " " + w[5]);
        if (w[0].equals("checksum")) out.add(w[1]);
        if (w[0].equals("ranks")) out.add(line);
      }
    }
    assertEquals(0, p.waitFor());
    return out;
  }

  static Trainer pipelinedTrainer(Model model, String schedule, int stages, int chunks) {
    TrainerOptions options = new TrainerOptions();
    options.setMicroBatches(MICRO_BATCHES);
    options.setSeed(42);
    options.setOptimizer("adamw");
    options.setLr(0.01f);
    options.setClipNorm(1.0f);
    options.setSchedule(schedule);
    options.setStages(stages);
    options.setChunks(chunks);
    return new Trainer(model, options);
  }

  @Test
  public void pipelinedStepsMatchTheCApiBitwise() throws Exception {
    String[][] cases = {{"1f1b", "2", "1"}, {"zb-v", "2", "1"}, {"interleaved-1f1b", "2", "2"}};
    for (String[] c : cases) {
      List<String> ref = runReference(c);
      assertEquals(c[0], STEPS + 2, ref.size());
      assertEquals(c[0], "ranks " + c[1] + " bubble_rate_ok 1", ref.get(STEPS + 1));
      // The runtime keeps a pipelined run bitwise equal to the sequential one.
      assertEquals(c[0], referenceLosses, ref.subList(0, STEPS));
      assertEquals(c[0], referenceChecksum, ref.get(STEPS));
      try (Model model = referenceModel();
          Trainer trainer =
              pipelinedTrainer(model, c[0], Integer.parseInt(c[1]), Integer.parseInt(c[2]))) {
        assertEquals(Integer.parseInt(c[1]), trainer.numRanks());
        List<String> losses = new ArrayList<>();
        for (int s = 0; s < STEPS; ++s) {
          Batch b = rows(s, 0, ROWS);
          losses.add(bits(trainer.step(b.inputs(), b.targets())));
        }
        assertEquals(c[0], ref.subList(0, STEPS), losses);
        assertEquals(c[0], ref.get(STEPS), trainer.checksum());
      }
    }
  }

  @Test
  public void pipelinedMeasurementsAfterAStep() {
    try (Model model = referenceModel(); Trainer trainer = pipelinedTrainer(model, "1f1b", 2, 1)) {
      PipeForgeException e = assertThrows(PipeForgeException.class, trainer::rankStats);
      assertEquals(PipeForgeException.FAILED_PRECONDITION, e.getCode());
      assertTrue(e.getMessage(), e.getMessage().contains("no step"));
      Batch b = rows(0, 0, ROWS);
      trainer.step(b.inputs(), b.targets());
      RankStats[] ranks = trainer.rankStats();
      assertEquals(2, ranks.length);
      for (RankStats r : ranks) {
        assertTrue(r.getBusy() > 0);
        assertTrue(r.getIdle() >= 0);
        assertTrue(r.getFinish() >= r.getFirstStart());
        assertTrue(r.getPeakActivations() >= 1);
        assertTrue(r.getPeakActivationBytes() > 0);
      }
      double bubble = trainer.bubbleRate();
      assertTrue("bubble rate " + bubble, bubble >= 0 && bubble < 1);
      assertTrue(new Json(trainer.timelineToChromeTrace()).parse() instanceof Map);
      assertTrue(trainer.timelineToSvg().contains("<svg"));
      e = assertThrows(PipeForgeException.class, () -> trainer.rankStats(2));
      assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    }
  }

  @Test
  public void scheduleTextAndExplicitPartition() {
    TrainerOptions options = new TrainerOptions();
    options.setMicroBatches(MICRO_BATCHES);
    options.setSeed(42);
    options.setLr(0.01f);
    options.setClipNorm(1.0f);
    options.setScheduleText("0F0 0F1 0BW0 0BW1\n1F0 1F1 1BW0 1BW1\n");
    options.setLayersPerStage(2, 3); // fc0 act0 | fc1 act1 head
    options.setRecvTimeoutSeconds(30);
    assertEquals(2, options.numLayersPerStage());
    assertEquals(3, options.layersInStage(1));
    try (Model model = referenceModel(); Trainer trainer = new Trainer(model, options)) {
      assertEquals(2, trainer.numRanks());
      List<String> losses = new ArrayList<>();
      for (int s = 0; s < STEPS; ++s) {
        Batch b = rows(s, 0, ROWS);
        losses.add(bits(trainer.step(b.inputs(), b.targets())));
      }
      assertMatchesReference(losses, trainer);
      for (RankStats r : trainer.rankStats()) assertEquals(2, r.getPeakActivations()); // GPipe
    }
  }

  @Test
  public void pipelineErrors() {
    PipeForgeException e =
        assertThrows(
            PipeForgeException.class,
            () -> new Trainer(referenceModel(), TrainerOptions.pipelined("2f2b", 2)));
    assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    assertTrue(e.getMessage(), e.getMessage().contains("2f2b"));
    TrainerOptions tooMany = TrainerOptions.pipelined("1f1b", 2);
    tooMany.setLayersPerStage(6, 6);
    e = assertThrows(PipeForgeException.class, () -> new Trainer(referenceModel(), tooMany));
    assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    assertTrue(e.getMessage(), e.getMessage().contains("layers"));
    try (Model model = referenceModel(); Trainer sequential = referenceTrainer(model)) {
      assertEquals(1, sequential.numRanks());
      Batch b = rows(0, 0, ROWS);
      sequential.step(b.inputs(), b.targets());
      e = assertThrows(PipeForgeException.class, sequential::rankStats);
      assertEquals(PipeForgeException.FAILED_PRECONDITION, e.getCode());
      assertTrue(e.getMessage(), e.getMessage().contains("not pipelined"));
      e = assertThrows(PipeForgeException.class, sequential::bubbleRate);
      assertEquals(PipeForgeException.FAILED_PRECONDITION, e.getCode());
      e = assertThrows(PipeForgeException.class, sequential::timelineToSvg);
      assertEquals(PipeForgeException.FAILED_PRECONDITION, e.getCode());
    }
  }

  // ---- activation memory ----

  @Test
  public void activationPoliciesKeepResultsBitwiseAndReportWhatMoved() throws Exception {
    // 4 ranks x 4 micro-batches: 1F1B's rank 0 holds 4 micro-batches, rank 3 one, so that every
    // policy has something to move (balance pairs rank 0 with rank 3).
    TrainerOptions sequentialOptions = new TrainerOptions();
    sequentialOptions.setMicroBatches(4);
    sequentialOptions.setSeed(42);
    sequentialOptions.setOptimizer("adamw");
    sequentialOptions.setLr(0.01f);
    sequentialOptions.setClipNorm(1.0f);
    List<String> expectedLosses = new ArrayList<>();
    String expectedChecksum;
    try (Model model = referenceModel(); Trainer sequential = new Trainer(model, sequentialOptions)) {
      for (int s = 0; s < STEPS; ++s) {
        Batch b = rows(s, 0, ROWS);
        expectedLosses.add(bits(sequential.step(b.inputs(), b.targets())));
      }
      expectedChecksum = sequential.checksum();
    }
    File offloadDir = new File(Files.createTempDirectory("pipeforge_java_offload").toFile(), "offload");
    String[] policies = {"none", "recompute", "offload-host", "offload-file", "balance", "selective"};
    for (String policy : policies) {
      TrainerOptions options = TrainerOptions.pipelined("1f1b", 4);
      options.setLayersPerStage(2, 1, 1, 1); // the even split: rank 0 holds the heaviest contexts
      options.setMicroBatches(4);
      options.setSeed(42);
      options.setOptimizer("adamw");
      options.setLr(0.01f);
      options.setClipNorm(1.0f);
      options.setActivationPolicy(policy);
      assertEquals(policy, options.getActivationPolicy());
      if (policy.equals("offload-file")) options.setOffloadDir(offloadDir.getPath());
      if (policy.equals("selective")) options.setActivationBudgetBytes(1e12); // nothing needs to move
      try (Model model = referenceModel(); Trainer trainer = new Trainer(model, options)) {
        List<String> losses = new ArrayList<>();
        for (int s = 0; s < STEPS; ++s) {
          Batch b = rows(s, 0, ROWS);
          losses.add(bits(trainer.step(b.inputs(), b.targets())));
        }
        assertEquals(policy, expectedLosses, losses);
        assertEquals(policy, expectedChecksum, trainer.checksum());
        RankStats rank0 = trainer.rankStats()[0];
        boolean moves = policy.equals("offload-host") || policy.equals("offload-file") || policy.equals("balance");
        if (moves) {
          assertTrue(policy + ": " + rank0.getOffloadedBytes(), rank0.getOffloadedBytes() > 0);
        } else {
          assertEquals(policy, 0.0, rank0.getOffloadedBytes(), 0.0);
        }
        if (policy.equals("recompute")) {
          assertTrue(policy + ": " + rank0.getRecomputes(), rank0.getRecomputes() > 0);
        } else {
          assertEquals(policy, 0, rank0.getRecomputes());
        }
      }
    }
    assertTrue("setOffloadDir reached the runtime", offloadDir.isDirectory());
  }

  @Test
  public void activationPolicyErrors() {
    TrainerOptions defaults = new TrainerOptions();
    assertEquals("", defaults.getActivationPolicy());
    assertEquals(0.0, defaults.getActivationBudgetBytes(), 0.0);
    assertEquals("", defaults.getOffloadDir());
    TrainerOptions unknown = TrainerOptions.pipelined("1f1b", 2);
    unknown.setMicroBatches(MICRO_BATCHES);
    unknown.setActivationPolicy("offload-gpu");
    PipeForgeException e =
        assertThrows(PipeForgeException.class, () -> new Trainer(referenceModel(), unknown));
    assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    assertTrue(e.getMessage(), e.getMessage().contains("offload-gpu"));
    assertTrue(e.getMessage(), e.getMessage().contains("offload-host")); // lists the known ones
    unknown.setActivationPolicy("selective"); // without a budget
    e = assertThrows(PipeForgeException.class, () -> new Trainer(referenceModel(), unknown));
    assertTrue(e.getMessage(), e.getMessage().contains("activation_budget_bytes"));
    TrainerOptions sequential = new TrainerOptions();
    sequential.setActivationPolicy("recompute");
    e = assertThrows(PipeForgeException.class, () -> new Trainer(referenceModel(), sequential));
    assertTrue(e.getMessage(), e.getMessage().contains("no schedule"));
  }

  // ---- devices ----

  static TrainerOptions deviceOptions(boolean pipelined, String devices) {
    TrainerOptions options = pipelined ? TrainerOptions.pipelined("1f1b", 2) : new TrainerOptions();
    options.setMicroBatches(MICRO_BATCHES);
    options.setSeed(42);
    options.setOptimizer("adamw");
    options.setLr(0.01f);
    options.setClipNorm(1.0f);
    options.setDevices(devices);
    return options;
  }

  @Test
  public void devicesCpuMatchesTheDefault() {
    assertEquals("", new TrainerOptions().getDevices());
    String[][] cases = {{"sequential", "cpu"}, {"pipelined", "cpu"}, {"pipelined", "cpu,cpu"}};
    for (String[] c : cases) {
      TrainerOptions options = deviceOptions(c[0].equals("pipelined"), c[1]);
      assertEquals(c[1], options.getDevices());
      try (Model model = referenceModel(); Trainer trainer = new Trainer(model, options)) {
        List<String> losses = new ArrayList<>();
        for (int s = 0; s < STEPS; ++s) {
          Batch b = rows(s, 0, ROWS);
          losses.add(bits(trainer.step(b.inputs(), b.targets())));
        }
        assertEquals(c[0] + " " + c[1], referenceLosses, losses);
        assertEquals(c[0] + " " + c[1], referenceChecksum, trainer.checksum());
      }
    }
  }

  @Test
  public void devicesCudaTrainsOrSaysItIsNotAvailable() {
    for (boolean pipelined : new boolean[] {false, true}) {
      Trainer trainer;
      try {
        trainer = new Trainer(referenceModel(), deviceOptions(pipelined, "cuda:0"));
      } catch (PipeForgeException e) { // no GPU visible to this process
        assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
        assertTrue(e.getMessage(), e.getMessage().contains("cuda:0 is not available"));
        continue;
      }
      try { // a GPU: it trains, close to the CPU's losses
        for (int s = 0; s < STEPS; ++s) {
          Batch b = rows(s, 0, ROWS);
          double loss = trainer.step(b.inputs(), b.targets()).getLoss();
          double expected =
              Double.longBitsToDouble(Long.parseUnsignedLong(referenceLosses.get(s).split(" ")[0], 16));
          assertEquals("pipelined " + pipelined, expected, loss, 1e-4 * Math.abs(expected) + 1e-6);
        }
      } finally {
        trainer.close();
      }
    }
  }

  @Test
  public void devicesErrors() {
    PipeForgeException e =
        assertThrows(
            PipeForgeException.class, () -> new Trainer(referenceModel(), deviceOptions(false, "gpu0")));
    assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    assertTrue(e.getMessage(), e.getMessage().contains("gpu0"));
    e =
        assertThrows(
            PipeForgeException.class, () -> new Trainer(referenceModel(), deviceOptions(true, "cpu,gpu0")));
    assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    assertTrue(e.getMessage(), e.getMessage().contains("gpu0"));
    e =
        assertThrows(
            PipeForgeException.class, () -> new Trainer(referenceModel(), deviceOptions(false, "cpu,cpu")));
    assertTrue(e.getMessage(), e.getMessage().contains("one device"));
  }

  // ---- processes (C API 0.3): the options round-trip, threads report process 0 of 1 ----

  @Test
  public void processOptionsRoundTrip() {
    TrainerOptions options = new TrainerOptions();
    assertEquals("auto", options.getProcesses());
    assertEquals(1, options.getDataParallel());
    assertEquals("", options.getGradientReduction());
    assertEquals(0, options.getRanks());
    assertEquals(1, options.getStages());
    options.setProcesses("threads");
    options.setDataParallel(3);
    options.setGradientReduction("deterministic");
    options.setRanks(2);
    assertEquals("threads", options.getProcesses());
    assertEquals(3, options.getDataParallel());
    assertEquals("deterministic", options.getGradientReduction());
    assertEquals(2, options.getRanks());
  }

  @Test
  public void ranksTrainsLikeStagesAndThreadsAreProcessZeroOfOne() {
    TrainerOptions options = deviceOptions(false, "");
    options.setSchedule("1f1b");
    options.setRanks(2);
    options.setProcesses("threads");
    try (Model model = referenceModel(); Trainer trainer = new Trainer(model, options)) {
      assertEquals(2, trainer.numRanks());
      ProcessInfo process = trainer.process();
      assertEquals(0, process.getRank());
      assertEquals(1, process.getSize());
      List<String> losses = new ArrayList<>();
      for (int s = 0; s < STEPS; ++s) {
        Batch b = rows(s, 0, ROWS);
        losses.add(bits(trainer.step(b.inputs(), b.targets())));
      }
      assertEquals(referenceLosses, losses);
      assertEquals(referenceChecksum, trainer.checksum());
      for (RankStats r : trainer.rankStats()) assertTrue(r.getLocal());
    }
    try (Schedule schedule = Schedule.generate("1f1b", 2, 2); Simulation simulation = schedule.simulate()) {
      for (RankStats r : simulation.ranks()) assertFalse(r.getLocal());
    }
  }

  @Test
  public void processErrorsNameTheOption() {
    TrainerOptions options = TrainerOptions.pipelined("1f1b", 2);
    options.setProcesses("mpi");
    PipeForgeException e = assertThrows(PipeForgeException.class, () -> new Trainer(referenceModel(), options));
    assertEquals(PipeForgeException.FAILED_PRECONDITION, e.getCode());
    assertTrue(e.getMessage(), e.getMessage().contains("not launched by mpirun"));
    options.setProcesses("mpich");
    e = assertThrows(PipeForgeException.class, () -> new Trainer(referenceModel(), options));
    assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    assertTrue(e.getMessage(), e.getMessage().contains("mpich"));
    options.setProcesses("threads");
    options.setDataParallel(2);
    e = assertThrows(PipeForgeException.class, () -> new Trainer(referenceModel(), options));
    assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    assertTrue(e.getMessage(), e.getMessage().contains("mpirun -np 4"));
    options.setDataParallel(1);
    options.setRanks(3);
    e = assertThrows(PipeForgeException.class, () -> new Trainer(referenceModel(), options));
    assertTrue(e.getMessage(), e.getMessage().contains("options->stages is 2"));
    options.setRanks(0);
    options.setGradientReduction("mean");
    e = assertThrows(PipeForgeException.class, () -> new Trainer(referenceModel(), options));
    assertTrue(e.getMessage(), e.getMessage().contains("gradient_reduction is 'mean'"));
  }

  // ---- asynchronous schedules (C API 0.4): the options, drain() ----

  /** Two steps (each loss finite), then drain(): the checksums before and after the drain. */
  static String[] twoStepsThenDrain(Trainer trainer) {
    for (int s = 0; s < 2; ++s) {
      Batch b = rows(s, 0, ROWS);
      double loss = trainer.step(b.inputs(), b.targets()).getLoss();
      assertTrue("loss " + loss, Double.isFinite(loss));
    }
    String inFlight = trainer.checksum();
    trainer.drain();
    return new String[] {inFlight, trainer.checksum()};
  }

  static TrainerOptions asyncOptions(String schedule) {
    TrainerOptions options = TrainerOptions.pipelined(schedule, 2);
    options.setMicroBatches(MICRO_BATCHES);
    options.setSeed(42);
    options.setOptimizer("sgd");
    options.setLr(0.05f);
    options.setMomentum(0.9f);
    return options;
  }

  @Test
  public void pipeDreamTrainsTwoStepsAndDrains() {
    TrainerOptions defaults = new TrainerOptions();
    assertFalse(defaults.getVerticalSync());
    assertEquals(1, defaults.getSpectrainVersion());
    assertEquals(100L, defaults.getPipemareAnnealUpdates());
    assertEquals(0.9f, defaults.getPipemareDecay(), 0.0f);
    try (Model model = referenceModel(); Trainer trainer = new Trainer(model, asyncOptions("pipedream"))) {
      String[] checksums = twoStepsThenDrain(trainer);
      String drained = checksums[1];
      assertNotEquals(checksums[0], drained);
      trainer.drain(); // nothing left: a no-op
      assertEquals(drained, trainer.checksum());
    }
    try (Model model = referenceModel(); Trainer trainer = referenceTrainer(model)) {
      trainer.drain(); // the sequential trainer: a no-op
    }
    TrainerOptions options = asyncOptions("spectrain");
    options.setVerticalSync(true);
    PipeForgeException e = assertThrows(PipeForgeException.class, () -> new Trainer(referenceModel(), options));
    assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    assertTrue(e.getMessage(), e.getMessage().contains("vertical_sync") && e.getMessage().contains("spectrain"));
    TrainerOptions pipemare = asyncOptions("pipemare");
    pipemare.setPipemareAnnealUpdates(0);
    pipemare.setPipemareDecay(0.5f);
    try (Model model = referenceModel(); Trainer trainer = new Trainer(model, pipemare)) {
      Batch b = rows(0, 0, ROWS);
      trainer.step(b.inputs(), b.targets());
      trainer.drain();
    }
  }

  // ---- local learning (C API 0.4): setLocalHead, drain() ----

  @Test
  public void ppllTrainsTwoStepsAndDrains() {
    assertEquals("auto", new TrainerOptions().getLocalHead());
    TrainerOptions options = TrainerOptions.pipelined("ppll", 2);
    options.setMicroBatches(MICRO_BATCHES);
    options.setSeed(42);
    options.setLocalHead("mlp");
    try (Model model = referenceModel(); Trainer trainer = new Trainer(model, options)) {
      String[] checksums = twoStepsThenDrain(trainer);
      assertNotEquals(checksums[0], checksums[1]);
    }
    TrainerOptions sync = TrainerOptions.pipelined("1f1b", 2);
    sync.setMicroBatches(MICRO_BATCHES);
    sync.setLocalHead("mlp");
    PipeForgeException e = assertThrows(PipeForgeException.class, () -> new Trainer(referenceModel(), sync));
    assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    assertTrue(e.getMessage(), e.getMessage().contains("local_head") && e.getMessage().contains("1f1b"));
    options.setLocalHead("conv");
    e = assertThrows(PipeForgeException.class, () -> new Trainer(referenceModel(), options));
    assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    assertTrue(e.getMessage(), e.getMessage().contains("'conv'"));
  }

  @Test
  public void selectiveAtTheMinimumBudgetLowersThePeak() {
    CostModel costs = new CostModel();
    assertEquals(0.0, costs.getMIn(), 0.0);
    assertEquals(0.0, costs.getTransferBandwidth(), 0.0);
    costs.setMB(100);
    costs.setMIn(10);
    costs.setTransferBandwidth(200);
    try (Schedule schedule = Schedule.generate("1f1b", 4, 8)) {
      try (Simulation sim = schedule.simulate(costs)) {
        assertEquals(400.0, sim.rankStats(0).getPeakActivationBytes(), 0.0);
      }
      double budget = schedule.minActivationBudget(costs);
      assertTrue("budget " + budget, budget > 0 && budget < 400);
      try (Schedule applied = schedule.applyActivationPolicy("selective", costs, budget);
          Simulation sim = applied.simulate(costs)) {
        applied.validate();
        assertTrue(!schedule.toText().contains("OFFLOAD")); // a new schedule
        RankStats rank0 = sim.rankStats(0);
        assertTrue("peak " + rank0.getPeakActivationBytes(), rank0.getPeakActivationBytes() < 400);
        assertTrue("peak " + rank0.getPeakActivationBytes(), rank0.getPeakActivationBytes() <= budget);
        assertTrue(rank0.getOffloadedBytes() > 0);
        assertEquals(0, rank0.getRecomputes());
      }
      PipeForgeException e =
          assertThrows(
              PipeForgeException.class,
              () -> schedule.applyActivationPolicy("selective", costs, budget / 2));
      assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
      assertTrue(e.getMessage(), e.getMessage().contains("smallest budget that works"));
      e = assertThrows(PipeForgeException.class, () -> schedule.applyActivationPolicy("swap"));
      assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
      assertTrue(e.getMessage(), e.getMessage().contains("unknown activation policy 'swap'"));
      try (Schedule recomputed = schedule.applyActivationPolicy("recompute", costs);
          Simulation sim = recomputed.simulate(costs)) {
        assertEquals(8, sim.rankStats(0).getRecomputes());
        assertEquals(0.0, sim.rankStats(0).getOffloadedBytes(), 0.0);
        double scalar = sim.rankStats(0).getPeakActivationBytes();
        assertTrue("peak " + scalar, scalar < 400);
        // m_in per stage, the sixth per-stage array.
        CostModel perStage = new CostModel();
        perStage.setMB(100);
        perStage.setStageMIn(10, 10, 10, 10);
        try (Simulation s = recomputed.simulate(perStage)) {
          assertEquals(scalar, s.rankStats(0).getPeakActivationBytes(), 0.0);
        }
        perStage.setStageMIn(50, 10, 10, 10);
        try (Simulation s = recomputed.simulate(perStage)) {
          assertTrue(s.rankStats(0).getPeakActivationBytes() > scalar);
        }
        perStage.setStageMB(100, 100, 100);
        e = assertThrows(PipeForgeException.class, () -> schedule.minActivationBudget(perStage));
        assertTrue(e.getMessage(), e.getMessage().contains("stage_m_b has 3 entries but stage_m_in has 4"));
      }
      assertTrue(schedule.minActivationBudget() > 0); // the default costs: m_b = 1
      assertEquals(6, Schedule.ACTIVATION_POLICIES.length);
      schedule.close();
      e = assertThrows(PipeForgeException.class, () -> schedule.minActivationBudget(costs));
      assertEquals(PipeForgeException.FAILED_PRECONDITION, e.getCode());
    }
  }

  // ---- schedules ----

  @Test
  public void oneFOneBBubbleRateAndPeakActivations() {
    ScheduleOptions options = new ScheduleOptions(4, 8);
    options.setChunks(1);
    try (Schedule schedule = Schedule.generate("1f1b", options);
        Simulation sim = schedule.simulate(new CostModel())) {
      assertEquals(4, schedule.numRanks());
      assertEquals(4, schedule.numStages());
      assertEquals(8, schedule.numMicroBatches());
      assertEquals(3.0 / 11.0, sim.bubbleRate(), 1e-12); // (P-1)/(M+P-1)
      assertEquals(3.0 / 11.0, sim.spanBubbleRate(), 1e-12);
      assertEquals(33.0, sim.makespan(), 0.0);
      assertEquals(24.0, sim.ideal(), 0.0);
      assertEquals(33.0, sim.maxSpan(), 0.0);
      assertEquals(4, sim.numRanks());
      RankStats[] ranks = sim.ranks();
      long[] peaks = new long[ranks.length];
      for (int i = 0; i < ranks.length; ++i) {
        peaks[i] = ranks[i].getPeakActivations();
        assertEquals(24.0, ranks[i].getBusy(), 0.0);
        assertEquals(33.0, ranks[i].getBusy() + ranks[i].getIdle(), 0.0);
        assertEquals(i, ranks[i].getFirstStart(), 0.0);
        assertEquals(peaks[i], ranks[i].getPeakActivationBytes(), 0.0);
      }
      assertArrayEquals(new long[] {4, 3, 2, 1}, peaks);
      assertTrue(sim.toAscii().contains("rank 3"));
      assertTrue(sim.toAscii(40).contains("rank 3"));
      assertTrue(sim.toSvg().contains("<svg"));
    }
  }

  @Test
  public void textRoundTripsThroughParse() {
    for (String name : new String[] {"1f1b", "zb-v", "zb-h2"}) {
      try (Schedule schedule = Schedule.generate(name, 4, 8);
          Schedule parsed = Schedule.parse(schedule.toText())) {
        assertEquals(name, schedule.toText(), parsed.toText());
        parsed.validate();
        try (Simulation a = schedule.simulate(); Simulation b = parsed.simulate()) {
          assertEquals(name, a.makespan(), b.makespan(), 0.0);
        }
      }
    }
  }

  @Test
  public void badScheduleNameThrowsNamingIt() {
    PipeForgeException e =
        assertThrows(PipeForgeException.class, () -> Schedule.generate("2f2b", 4, 8));
    assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    assertEquals("INVALID_ARGUMENT", e.getCodeName());
    assertTrue(e.getMessage(), e.getMessage().contains("'2f2b'"));
    assertTrue(e.getMessage(), e.getMessage().contains("zb-h1"));
    e = assertThrows(PipeForgeException.class, () -> Schedule.generate("1f1b", new ScheduleOptions()));
    assertTrue(e.getMessage(), e.getMessage().contains("stages"));
    e = assertThrows(PipeForgeException.class, () -> Schedule.parse("0F0 0QQ1"));
    assertTrue(e.getMessage(), e.getMessage().contains("0QQ1"));
    Schedule schedule = Schedule.generate("gpipe", 2, 2);
    CostModel negative = new CostModel();
    negative.setTF(-1);
    e = assertThrows(PipeForgeException.class, () -> schedule.simulate(negative));
    assertTrue(e.getMessage(), e.getMessage().contains("t_f"));
    assertThrows(NullPointerException.class, () -> new CostModel().setStageTF((double[]) null));
    try (Simulation sim = schedule.simulate()) {
      e = assertThrows(PipeForgeException.class, () -> sim.toAscii(3));
      assertTrue(e.getMessage(), e.getMessage().contains("width"));
    }
    schedule.close();
    schedule.close(); // idempotent
    e = assertThrows(PipeForgeException.class, schedule::toText);
    assertEquals(PipeForgeException.FAILED_PRECONDITION, e.getCode());
  }

  // Since 0.6: PyTorch's CSV, send/recv semantics, the cost-driven V schedules.
  private static final String DEFERRED_RECEIVES =
      "0F0,0SEND_F0,0RECV_B0,0F1,0SEND_F1,0B0,0RECV_B1,0B1\n"
          + "1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n";

  @Test
  public void pytorchCsvRoundTrips() {
    try (Schedule schedule = Schedule.generate("zb-h1", 4, 8);
        Schedule parsed = Schedule.parsePytorchCsv(schedule.toPytorchCsv());
        Schedule lowered = schedule.lower();
        Schedule reparsed = Schedule.parsePytorchCsv(lowered.toPytorchCsv(true))) {
      String csv = schedule.toPytorchCsv();
      assertTrue(csv, csv.contains("3F0,3I0,3F1"));
      assertEquals(csv, parsed.toPytorchCsv(false));
      assertTrue(lowered.toPytorchCsv(true).contains("RECV_B"));
      assertEquals(lowered.toPytorchCsv(true), reparsed.toPytorchCsv(true));
      try (Simulation a = schedule.simulate(); Simulation b = parsed.simulate()) {
        assertEquals(a.makespan(), b.makespan(), 0.0);
      }
    }
    PipeForgeException e =
        assertThrows(PipeForgeException.class, () -> Schedule.parsePytorchCsv("0F0,0QQ0\n"));
    assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
    assertTrue(e.getMessage(), e.getMessage().contains("0QQ0"));
  }

  @Test
  public void deferredReceivesValidateAndSimulatePosted() {
    assertEquals(2, Schedule.COMM_SEMANTICS.length);
    try (Schedule schedule = Schedule.parsePytorchCsv(DEFERRED_RECEIVES)) {
      assertEquals(DEFERRED_RECEIVES, schedule.toPytorchCsv(true));
      PipeForgeException e = assertThrows(PipeForgeException.class, schedule::validate);
      assertTrue(e.getMessage(), e.getMessage().contains("deadlock"));
      assertThrows(PipeForgeException.class, () -> schedule.validate("rendezvous"));
      schedule.validate("posted");
      assertThrows(PipeForgeException.class, () -> schedule.simulate());
      CostModel costs = new CostModel();
      costs.setTComm(0.5);
      // 0BW0 waits for 1SEND_B0 (4.5) + 0.5; 0BW1 for 1SEND_B1 (7.5) + 0.5 and ends at 10.
      try (Simulation sim = schedule.simulate(costs, "posted")) {
        assertEquals(10.0, sim.makespan(), 0.0);
      }
      try (Simulation sim = schedule.simulate("posted")) {
        assertEquals(9.0, sim.makespan(), 0.0);
      }
      e = assertThrows(PipeForgeException.class, () -> schedule.validate("buffered"));
      assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
      assertTrue(e.getMessage(), e.getMessage().contains("'buffered'"));
      e = assertThrows(PipeForgeException.class, () -> schedule.simulate(costs, "eager"));
      assertTrue(e.getMessage(), e.getMessage().contains("'eager'"));
    }
  }

  @Test
  public void vMinTakesMemLimit() {
    ScheduleOptions options = new ScheduleOptions(6, 12);
    options.setMemLimit(1);
    try (Schedule own = Schedule.generate("v-min", 6, 12);
        Schedule capped = Schedule.generate("v-min", options);
        Simulation a = own.simulate();
        Simulation b = capped.simulate()) {
      double ownPeak = 0, cappedPeak = 0;
      for (RankStats r : a.ranks()) ownPeak = Math.max(ownPeak, r.getPeakActivationBytes());
      for (RankStats r : b.ranks()) cappedPeak = Math.max(cappedPeak, r.getPeakActivationBytes());
      assertTrue(ownPeak <= 2 * 3.0);
      assertTrue(cappedPeak <= 2 * 1.0);
      assertTrue(ownPeak > cappedPeak);
    }
  }

  @Test
  public void loweredScheduleSimulatesToTheSameMakespan() {
    for (String name : new String[] {"1f1b", "zb-h1", "zb-v"}) {
      try (Schedule schedule = Schedule.generate(name, 4, 8); Schedule lowered = schedule.lower()) {
        lowered.validate();
        assertTrue(lowered.toText().contains("SEND_F"));
        assertTrue(!schedule.toText().contains("SEND_F"));
        for (double tComm : new double[] {0.0, 0.25}) {
          CostModel costs = new CostModel();
          costs.setTComm(tComm);
          try (Simulation a = schedule.simulate(costs); Simulation b = lowered.simulate(costs)) {
            assertEquals(name, a.makespan(), b.makespan(), 1e-12);
          }
        }
      }
    }
  }

  @Test
  public void perStageCosts() {
    try (Schedule schedule = Schedule.generate("gpipe", 2, 2)) {
      CostModel costs = new CostModel();
      costs.setStageTF(1.0, 3.0);
      try (Simulation sim = schedule.simulate(costs)) {
        assertEquals(2 * (1.0 + 1.0 + 1.0), sim.rankStats(0).getBusy(), 0.0);
        assertEquals(2 * (3.0 + 1.0 + 1.0), sim.rankStats(1).getBusy(), 0.0);
      }
      costs.setTW(0);
      costs.setStageMB(2.0, 5.0);
      try (Simulation sim = schedule.simulate(costs)) {
        assertEquals(2 * (3.0 + 1.0), sim.ranks()[1].getBusy(), 0.0);
        assertEquals(10.0, sim.ranks()[1].getPeakActivationBytes(), 0.0);
      }
      costs.setStageTB(1.0, 1.0, 1.0);
      PipeForgeException e = assertThrows(PipeForgeException.class, () -> schedule.simulate(costs));
      assertTrue(e.getMessage(), e.getMessage().contains("stage_t_b has 3"));
      costs.clearStageCosts();
      try (Simulation sim = schedule.simulate(costs)) {
        assertEquals(2 * (1.0 + 1.0), sim.rankStats(1).getBusy(), 0.0);
      }
    }
  }

  @Test
  @SuppressWarnings("unchecked")
  public void chromeTraceIsJson() {
    Simulation sim;
    try (Schedule schedule = Schedule.generate("zb-h1", 4, 8)) {
      CostModel costs = new CostModel();
      costs.setTComm(0.5);
      sim = schedule.simulate(costs);
    } // a simulation does not need its schedule
    try (Simulation s = sim) {
      Map<String, Object> trace = (Map<String, Object>) new Json(s.toChromeTrace()).parse();
      int actions = 0;
      Set<Object> tracks = new HashSet<>();
      double end = 0;
      for (Object o : (List<Object>) trace.get("traceEvents")) {
        Map<String, Object> event = (Map<String, Object>) o;
        if (!"X".equals(event.get("ph"))) continue;
        if (!List.of("F", "B", "W").contains(event.get("cat"))) continue;
        ++actions;
        tracks.add(event.get("tid"));
        end = Math.max(end, (Double) event.get("ts") + (Double) event.get("dur"));
      }
      assertEquals(4 * 8 * 3, actions); // F, B and W of every (micro-batch, stage)
      assertEquals(4, tracks.size()); // a track per rank
      assertEquals(s.makespan(), end, 1e-6);
    }
    PipeForgeException e = assertThrows(PipeForgeException.class, sim::toChromeTrace);
    assertEquals(PipeForgeException.FAILED_PRECONDITION, e.getCode());
  }

  /** A strict JSON reader (objects, arrays, strings, numbers as Double, true/false/null). */
  static final class Json {
    private final String s;
    private int i;

    Json(String text) {
      s = text;
    }

    Object parse() {
      Object v = value();
      space();
      if (i != s.length()) throw error("trailing characters");
      return v;
    }

    private Object value() {
      space();
      if (i >= s.length()) throw error("unexpected end");
      char c = s.charAt(i);
      if (c == '{') {
        ++i;
        Map<String, Object> m = new LinkedHashMap<>();
        space();
        if (peek('}')) return m;
        do {
          space();
          String key = string();
          space();
          expect(':');
          m.put(key, value());
          space();
        } while (peek(','));
        expect('}');
        return m;
      }
      if (c == '[') {
        ++i;
        List<Object> l = new ArrayList<>();
        space();
        if (peek(']')) return l;
        do {
          l.add(value());
          space();
        } while (peek(','));
        expect(']');
        return l;
      }
      if (c == '"') return string();
      for (String word : new String[] {"true", "false", "null"}) {
        if (s.startsWith(word, i)) {
          i += word.length();
          return word.equals("null") ? null : Boolean.valueOf(word);
        }
      }
      int start = i;
      while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) ++i;
      if (start == i) throw error("unexpected '" + c + "'");
      return Double.valueOf(s.substring(start, i));
    }

    private String string() {
      expect('"');
      StringBuilder b = new StringBuilder();
      while (true) {
        if (i >= s.length()) throw error("unterminated string");
        char c = s.charAt(i++);
        if (c == '"') return b.toString();
        if (c < 0x20) throw error("control character in a string");
        if (c != '\\') {
          b.append(c);
          continue;
        }
        char e = s.charAt(i++);
        switch (e) {
          case 'u':
            b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
            i += 4;
            break;
          case 'n':
            b.append('\n');
            break;
          case 't':
            b.append('\t');
            break;
          case 'r':
            b.append('\r');
            break;
          case 'b':
            b.append('\b');
            break;
          case 'f':
            b.append('\f');
            break;
          case '"':
          case '\\':
          case '/':
            b.append(e);
            break;
          default:
            throw error("bad escape \\" + e);
        }
      }
    }

    private void space() {
      while (i < s.length() && " \t\r\n".indexOf(s.charAt(i)) >= 0) ++i;
    }

    private boolean peek(char c) {
      if (i < s.length() && s.charAt(i) == c) {
        ++i;
        return true;
      }
      return false;
    }

    private void expect(char c) {
      if (!peek(c)) throw error("expected '" + c + "'");
    }

    private IllegalArgumentException error(String what) {
      return new IllegalArgumentException("bad JSON at " + i + ": " + what);
    }
  }

  // ---- the training loop (C API 0.5) ----

  static DataOptions text(boolean heldOut) {
    DataOptions d = new DataOptions();
    d.setKind("char_text");
    d.setRows(2);
    d.setSeqLen(16);
    d.setSeed(3);
    d.setHeldOutFraction(0.1);
    d.setHeldOut(heldOut);
    return d;
  }

  /** A tiny GPT on the licence texts, 1F1B over 2 ranks, cosine rate, both built-in loaders. */
  static Trainer textTrainer(Model[] keep) {
    DataInfo info = PipeForge.builtinDataInfo(text(false));
    assertTrue(info.getVocabSize() > 40);
    GptConfig config = new GptConfig();
    config.setVocab(info.getVocabSize());
    config.setSeqLen(info.getSeqLen());
    config.setDModel(16);
    config.setHeads(2);
    config.setLayers(2);
    keep[0] = Model.gpt(config);
    TrainerOptions options = TrainerOptions.pipelined("1f1b", 2);
    options.setMicroBatches(2);
    options.setSeed(7);
    options.setLr(0.01f);
    options.setLrSchedule("cosine");
    options.setWarmupSteps(2);
    options.setDecaySteps(6);
    options.setMinLr(1e-4);
    Trainer trainer = new Trainer(keep[0], options);
    trainer.setBuiltinData(text(false));
    trainer.setBuiltinEvalData(text(true));
    return trainer;
  }

  /** A GPT of 2 heads for the licence texts' vocabulary and rows. */
  static GptConfig textGpt(int dModel, int layers) {
    DataInfo info = PipeForge.builtinDataInfo(text(false));
    GptConfig config = new GptConfig();
    config.setVocab(info.getVocabSize());
    config.setSeqLen(info.getSeqLen());
    config.setDModel(dModel);
    config.setHeads(2);
    config.setLayers(layers);
    return config;
  }

  /**
   * Three steps of a tiny GPT on the licence texts over 2 ranks with {@code schedule} and
   * setSeqSlices({@code slices}); rank 0's peak activations (units held at once) go to peak[0].
   */
  static double[] seqSlicedLosses(String schedule, int slices, long[] peak) {
    GptConfig config = textGpt(16, 2);
    TrainerOptions options = TrainerOptions.pipelined(schedule, 2);
    options.setMicroBatches(2);
    options.setSeed(7);
    options.setLr(0.01f);
    options.setSeqSlices(slices);
    assertEquals(slices, options.getSeqSlices());
    double[] losses = new double[3];
    try (Model model = Model.gpt(config); Trainer trainer = new Trainer(model, options)) {
      trainer.setBuiltinData(text(false));
      for (int i = 0; i < losses.length; ++i) losses[i] = trainer.stepFromLoader().getLoss();
      peak[0] = trainer.rankStats(0).getPeakActivations();
    }
    return losses;
  }

  /** Sequence-sliced 1F1B (C API 0.7): setSeqSlices(2) with seq1f1b is 1f1b within 1e-5 relative. */
  @Test
  public void seqSlicesTrainWithinToleranceOf1f1b() {
    assertEquals(1, new TrainerOptions().getSeqSlices());
    long[] wholePeak = new long[1], slicedPeak = new long[1], onePeak = new long[1];
    double[] whole = seqSlicedLosses("1f1b", 1, wholePeak);
    double[] sliced = seqSlicedLosses("seq1f1b", 2, slicedPeak);
    for (int i = 0; i < whole.length; ++i) {
      assertTrue(Double.isFinite(sliced[i]));
      assertEquals("step " + i, whole[i], sliced[i], 1e-5 * Math.abs(whole[i]));
    }
    // Rank 0 holds p + S - 1 = 3 half micro-batches instead of p = 2 micro-batches.
    assertEquals(2, wholePeak[0]);
    assertEquals(3, slicedPeak[0]);
    // One slice is 1f1b, bitwise.
    assertArrayEquals(whole, seqSlicedLosses("seq1f1b", 1, onePeak), 0.0);
    PipeForgeException e =
        assertThrows(PipeForgeException.class, () -> seqSlicedLosses("seq1f1b", 3, onePeak));
    assertEquals("INVALID_ARGUMENT", e.getCodeName());
    assertTrue(e.getMessage(), e.getMessage().contains("seq_slices 3 must divide the model's seq_len 16"));
    e = assertThrows(PipeForgeException.class, () -> seqSlicedLosses("1f1b", 2, onePeak));
    assertTrue(e.getMessage(), e.getMessage().contains("1f1b does not slice sequences: seq_slices must be 1"));
  }

  /**
   * The split by parameter count (C API 0.10): Linear 8->64 (576 values), relu, Linear 64->8 (520),
   * relu, Linear 8->8 (72), relu, Linear 8->4 (36) in two stages of at most 628 values puts the first
   * Linear alone (the even split, 4 + 3, would put 1096 on the first).
   */
  @Test
  public void partitionByParametersBalancesParameterCounts() {
    MlpConfig config = new MlpConfig();
    config.setInputDim(FEATURES);
    config.setHidden(64, 8, 8);
    config.setClasses(CLASSES);
    config.setActivation("relu");
    try (Model model = Model.mlp(config)) {
      long[] counts = model.partitionByParameters(2);
      assertArrayEquals(new long[] {1, 6}, counts);
      TrainerOptions options = TrainerOptions.pipelined("1f1b", 2);
      options.setLayersPerStage(counts);
      try (Trainer trainer = new Trainer(model, options)) {
        assertArrayEquals(counts, trainer.partition());
      }
      PipeForgeException e = assertThrows(PipeForgeException.class, () -> model.partitionByParameters(8));
      assertEquals("INVALID_ARGUMENT", e.getCodeName());
      assertTrue(e.getMessage(), e.getMessage().contains("num_stages is 8"));
    }
  }

  /**
   * Six steps of a GPT of 7 top-level layers on the licence texts: sequential, or (adapt) 1f1b on 2
   * ranks with rank 1 at 4x and adaptation on; moves[0] gets adaptationsJson().
   */
  static double[] adaptLosses(boolean adapt, String[] moves) {
    GptConfig config = textGpt(32, 4);
    TrainerOptions options = adapt ? TrainerOptions.pipelined("1f1b", 2) : new TrainerOptions();
    options.setMicroBatches(4);
    options.setSeed(7);
    options.setLr(0.01f);
    if (adapt) {
      options.setAdapt(true);
      options.setSlowRank(1);
      options.setSlowFactor(4.0);
    }
    double[] losses = new double[6];
    try (Model model = Model.gpt(config); Trainer trainer = new Trainer(model, options)) {
      trainer.setBuiltinData(text(false));
      for (int i = 0; i < losses.length; ++i) losses[i] = trainer.stepFromLoader().getLoss();
      moves[0] = trainer.adaptationsJson();
    }
    return losses;
  }

  /** Fail-slow adaptation (C API 0.9): layers move off the slow rank, the losses stay bitwise. */
  @Test
  public void adaptMovesLayersOffASlowRankBitwise() {
    assertFalse(new TrainerOptions().getAdapt());
    assertEquals(-1, new TrainerOptions().getSlowRank());
    String[] moves = new String[1];
    double[] sequential = adaptLosses(false, moves);
    assertEquals("[]", moves[0]);
    double[] adapted = adaptLosses(true, moves);
    assertArrayEquals(sequential, adapted, 0.0);
    java.util.regex.Matcher m =
        java.util.regex.Pattern.compile("^\\[\\{\"from\":\\[(\\d+),(\\d+)\\],\"slowdown\":\\[[^]]*\\],\"step\":(\\d+),"
                                        + "\"to\":\\[(\\d+),(\\d+)\\]\\}").matcher(moves[0]);
    assertTrue(moves[0], m.find());
    // Patience is 3 steps: never before step 3; a noisy early step on this small model may delay it.
    assertTrue(moves[0], Integer.parseInt(m.group(3)) >= 3);
    assertTrue(moves[0], Integer.parseInt(m.group(5)) < Integer.parseInt(m.group(2)));
  }

  /** A packed MLP sweep in the bubbles (C API 0.14): the "fill" entry, losses unchanged, fillReportJson. */
  @Test
  public void aSweepFillsTheBubblesWithoutChangingTheRun() throws Exception {
    File spec = File.createTempFile("grid", ".json");
    spec.deleteOnExit();
    java.nio.file.Files.write(spec.toPath(),
        "{\"hidden\": [4, 8], \"samples\": 200, \"features\": 6, \"classes\": 3}".getBytes("UTF-8"));
    double[][] losses = new double[2][6];
    String report = null;
    for (int run = 0; run < 2; ++run) {
      TrainerOptions options = TrainerOptions.pipelined("1f1b", 2);
      options.setMicroBatches(4);
      options.setSeed(7);
      options.setLr(0.01f);
      if (run == 1) options.set("fill", "sweep:" + spec.getPath());
      try (Model model = Model.gpt(textGpt(32, 4)); Trainer trainer = new Trainer(model, options)) {
        trainer.setBuiltinData(text(false));
        for (int i = 0; i < 6; ++i) losses[run][i] = trainer.stepFromLoader().getLoss();
        report = trainer.fillReportJson();
        if (run == 0) assertEquals("null", report);
      }
    }
    assertArrayEquals(losses[0], losses[1], 0.0);
    assertTrue(report, report.contains("\"kind\":\"sweep\""));
    assertTrue(report, report.contains("\"model_count\":2"));
    assertFalse(report, report.contains("\"steps_taken\":0,"));
  }

  static RunOptions loop(long steps, File dir) {
    RunOptions o = new RunOptions();
    o.setSteps(steps);
    o.setEvalEvery(3);
    o.setCheckpointEvery(3);
    o.setKeepCheckpoints(2);
    o.setCheckpointDir(new File(dir, "ck").getPath());
    return o;
  }

  // Issue 43 item 3: a run can be watched and stopped. A listener returning true ends it after
  // that step with its checkpoint written; one that throws ends it too, and run throws it.
  @Test
  public void aRunCanBeWatchedAndStopped() throws IOException {
    File dir = Files.createTempDirectory("pipeforge_java_watch").toFile();
    Model[] keep = new Model[1];
    java.util.List<Long> seen = new java.util.ArrayList<>();
    try (Trainer trainer = textTrainer(keep)) {
      RunOptions o = new RunOptions();
      o.setSteps(7);
      o.setCheckpointEvery(100);
      o.setCheckpointDir(dir.getPath());
      RunResult r = trainer.run(o, info -> {
        seen.add(info.getStep());
        assertTrue(info.getLr() > 0.0);
        return info.getStep() == 3;
      });
      assertTrue(r.getStopped());
      assertEquals(3, r.getStep());
      assertEquals(java.util.Arrays.asList(1L, 2L, 3L), seen);
      assertEquals(new File(dir, "step-00000003.pfckpt").getPath(), r.getLastCheckpoint());
    }
    try (Trainer trainer = textTrainer(keep)) {
      RunOptions o = new RunOptions();
      o.setSteps(5);
      IllegalStateException thrown = assertThrows(IllegalStateException.class, () -> trainer.run(o, info -> {
        throw new IllegalStateException("the listener broke");
      }));
      assertEquals("the listener broke", thrown.getMessage());
      assertEquals(1, trainer.metrics().getStep());
    }
  }

  @Test
  public void aRunResumedFromItsCheckpointFolderEqualsOneRun() throws IOException {
    File whole = Files.createTempDirectory("pipeforge_java_run").toFile();
    File parts = Files.createTempDirectory("pipeforge_java_run").toFile();
    Model[] keep = new Model[1];
    String want;
    try (Trainer one = textTrainer(keep)) {
      RunResult r = one.run(loop(7, whole));
      assertEquals(7, r.getStep());
      assertEquals(3, r.getEvaluations());
      assertEquals(3, r.getCheckpoints());
      assertFalse(r.getDiverged());
      assertEquals(new File(whole, "ck/step-00000007.pfckpt").getPath(), r.getLastCheckpoint());
      assertTrue(r.getEvalAccuracy() > 0.0);
      want = one.checksum();
      EvalResult e = one.evaluate(2);
      assertEquals(r.getEvalLoss(), e.getLoss(), 0.0);  // the last evaluation, on the same weights
      assertEquals(4, e.getSamples());
      assertEquals(want, one.checksum());  // evaluation trains nothing
      assertArrayEquals(new long[] {2, 3}, one.partition());  // balanced parameters, the default
    }
    // Options as key/value entries (C API 0.11): checked by the runtime, winning over the setters.
    TrainerOptions keyed = TrainerOptions.pipelined("1f1b", 2);
    keyed.set("layers_per_stage", "4,1");
    try (Model model = referenceModel(); Trainer t = new Trainer(model, keyed)) {
      assertArrayEquals(new long[] {4, 1}, t.partition());
    }
    keyed.set("partiton", "even");
    try (Model model = referenceModel()) {
      PipeForgeException e = assertThrows(PipeForgeException.class, () -> new Trainer(model, keyed).close());
      assertTrue(e.getMessage(), e.getMessage().contains("did you mean 'partition'"));
    }
    try (Trainer half = textTrainer(keep)) {
      half.run(loop(3, parts));
    }
    try (Trainer rest = textTrainer(keep)) {
      rest.loadCheckpoint(new File(parts, "ck").getPath());
      assertEquals(3, rest.metrics().getStep());
      rest.run(loop(4, parts));
      assertEquals(want, rest.checksum());
    }
  }

  @Test
  public void evaluationAndTheScheduledRateThroughCallbacks() {
    double[] losses = new double[2];
    for (int i = 0; i < 2; ++i) {
      TrainerOptions options = i == 0 ? new TrainerOptions() : TrainerOptions.pipelined("zb-v", 2);
      options.setMicroBatches(MICRO_BATCHES);
      options.setSeed(42);
      options.setLr(0.01f);
      options.setWarmupSteps(4);
      try (Model model = referenceModel(); Trainer trainer = new Trainer(model, options)) {
        trainer.setDataLoader(PipeForgeTest::microBatch);
        StepResult first = trainer.stepFromLoader();
        assertEquals(0.0025, first.getLr(), 1e-9);  // warm-up: lr * 1 / 4
        trainer.setEvalLoader(position -> microBatch(4 + position));
        losses[i] = trainer.evaluate(2).getLoss();
      }
    }
    assertEquals(losses[0], losses[1], 0.0);  // the pipeline evaluates bitwise like the sequential trainer
    try (Model model = referenceModel(); Trainer trainer = referenceTrainer(model)) {
      trainer.setEvalLoader(
          position -> {
            throw new IOException("held-out shard missing");
          });
      PipeForgeException e = assertThrows(PipeForgeException.class, () -> trainer.evaluate(1));
      assertEquals(PipeForgeException.CALLBACK_ERROR, e.getCode());
      assertTrue(e.getCause() instanceof IOException);
    }
  }

  /** Prints the version: run_junit.sh uses it to check loading without -Dpipeforge.jni.library. */
  public static void main(String[] args) {
    if (args.length == 2 && args[0].equals("interrupted-run")) {
      interruptedRun(new File(args[1]));
      return;
    }
    System.out.println("PipeForge " + PipeForge.version() + " (ABI " + PipeForge.libraryAbiVersion() + ")");
  }

  /**
   * What run_junit.sh sends SIGINT to: a run of far more steps than it gets to, printing each step.
   * The JVM's shutdown (Ctrl-C) must end it after the step in progress, with its checkpoint written
   * into {@code dir}, before the JVM exits.
   */
  static void interruptedRun(File dir) {
    Model[] keep = new Model[1];
    Trainer trainer = textTrainer(keep);
    RunOptions o = new RunOptions();
    o.setSteps(1000000);
    o.setCheckpointEvery(1000000);
    o.setCheckpointDir(dir.getPath());
    RunResult r = trainer.run(o, info -> {
      System.out.println("step " + info.getStep());
      System.out.flush();
      return false;  // go on: only the interrupt stops it
    });
    System.out.println("run returned at step " + r.getStep() + ", stopped " + r.getStopped());
  }

  @Test
  public void version() {
    assertTrue(PipeForge.version().matches("\\d+\\.\\d+\\.\\d+"));
    assertEquals(PipeForge.headerAbiVersion(), PipeForge.libraryAbiVersion());
    assertSame(Tensor.class, Tensor.fromInts(new int[] {1}, 1).getClass());
  }

  // ---- planning (C API 0.8) ----

  static TrainerOptions planTrainerOptions(int microBatches) {
    TrainerOptions options = new TrainerOptions();
    options.setMicroBatches(microBatches);
    options.setSeed(42);
    options.setOptimizer("adamw");
    options.setLr(0.01f);
    options.setClipNorm(1.0f);
    return options;
  }

  static PlanOptions planOptions() {
    PlanOptions options = new PlanOptions();
    options.setClusterJson("{\"devices_per_node\": 2, \"device\": {\"kind\": \"cpu\", \"memory_gib\": 1},"
        + " \"intra_node\": {\"bandwidth_gb_per_s\": 10, \"latency_us\": 5}}");
    options.setSchedules("1f1b,zb-h1,gpipe");
    options.setRepeats(1);
    options.setCalibrationSteps(1);
    return options;
  }

  static String trainThreeSteps(TrainerOptions options) {
    try (Model model = referenceModel(); Trainer trainer = new Trainer(model, options)) {
      for (int step = 0; step < STEPS; ++step) {
        Batch b = rows(step, 0, ROWS);
        trainer.step(b.inputs(), b.targets());
      }
      return trainer.checksum();
    }
  }

  @Test
  public void planRanksCandidatesAndItsChoiceTrainsBitwise() {
    Batch b = rows(0, 0, ROWS);
    try (Model model = referenceModel();
        Plan plan = new Plan(model, b.inputs(), b.targets(), planTrainerOptions(2), planOptions())) {
      int n = plan.numCandidates();
      assertTrue(n > 3);
      assertTrue(plan.candidateJson(0).contains("\"step_seconds\""));
      assertTrue(plan.toSvg().contains("Pareto front"));
      boolean compared = false;
      for (int i = 0; i < n && !compared; ++i) {
        TrainerOptions options = planTrainerOptions(2);
        plan.apply(i, options);
        if (options.getSchedule().isEmpty() || options.getDataParallel() != 1) continue;
        assertEquals(trainThreeSteps(planTrainerOptions(options.getMicroBatches())), trainThreeSteps(options));
        compared = true;
      }
      assertTrue("no pipelined candidate on one replica", compared);
    }
  }

  @Test
  public void planNamesABadClusterField() {
    Batch b = rows(0, 0, ROWS);
    PlanOptions options = planOptions();
    options.setClusterJson("{\"devices_per_node\": 2, \"device\": {\"kind\": \"tpu\", \"memory_gib\": 1},"
        + " \"intra_node\": {\"bandwidth_gb_per_s\": 10, \"latency_us\": 5}}");
    try (Model model = referenceModel()) {
      PipeForgeException e = assertThrows(PipeForgeException.class,
          () -> new Plan(model, b.inputs(), b.targets(), planTrainerOptions(2), options));
      assertEquals(PipeForgeException.INVALID_ARGUMENT, e.getCode());
      assertTrue(e.getMessage(), e.getMessage().contains("device.kind: unknown device kind 'tpu'"));
    }
  }

  /** Ridge regression by coordinate descent reaches the normal equations' solution, solved here. */
  @Test
  public void linearModelReachesTheNormalEquations() {
    float[] x = {1, 0, 0, 2, 1, 1, -1, 0.5f, 2, 0, 0, -1};
    double[] y = {1.0, 2.0, 1.5, -0.5, 2.5, -1.0};
    double lambda = 0.1;
    double[][] a = new double[2][2];
    double[] b = new double[2];
    for (int i = 0; i < 6; ++i) {
      for (int j = 0; j < 2; ++j) {
        b[j] += x[i * 2 + j] * y[i] / 6;
        for (int k = 0; k < 2; ++k) a[j][k] += (double) x[i * 2 + j] * x[i * 2 + k] / 6;
      }
    }
    a[0][0] += lambda;
    a[1][1] += lambda;
    double det = a[0][0] * a[1][1] - a[0][1] * a[1][0];
    double[] want = {(b[0] * a[1][1] - a[0][1] * b[1]) / det, (a[0][0] * b[1] - a[1][0] * b[0]) / det};
    GlmOptions options = new GlmOptions();
    options.setLoss("squared");
    options.setLambda(lambda);
    options.setTol(1e-12);
    GlmData data = new GlmData();
    data.setDense(Tensor.fromFloats(x, 6, 2));
    data.setLabels(y);
    try (GlmModel model = GlmModel.train(data, options)) {
      GlmResult r = model.result();
      assertTrue(r.getConverged());
      assertEquals(2, r.getFeatures());
      String json = model.toJson();
      int at = json.indexOf("\"weights\":[");
      String[] w = json.substring(at + 11, json.indexOf(']', at)).split(",");
      assertEquals(want[0], Double.parseDouble(w[0]), 1e-6);
      assertEquals(want[1], Double.parseDouble(w[1]), 1e-6);
    }
    // An L1 weight above every |gradient| at w = 0 zeroes every weight.
    options.setL1(100);
    try (GlmModel model = GlmModel.train(data, options)) {
      String json = model.toJson();
      assertTrue(json, json.contains("\"weights\":[0.0,0.0]"));
    }
    options.setL1(0);
    options.setLambda(0);
    PipeForgeException e = assertThrows(PipeForgeException.class, () -> GlmModel.train(data, options));
    assertTrue(e.getMessage(), e.getMessage().contains("lambda must be > 0"));
  }
}

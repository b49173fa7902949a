package org.pipeforge.test;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
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
import java.util.List;
import org.junit.BeforeClass;
import org.junit.Test;
import org.pipeforge.Batch;
import org.pipeforge.DataLoader;
import org.pipeforge.MlpConfig;
import org.pipeforge.Model;
import org.pipeforge.PipeForge;
import org.pipeforge.PipeForgeException;
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

  /** Prints the version: run_junit.sh uses it to check loading without -Dpipeforge.jni.library. */
  public static void main(String[] args) {
    System.out.println("PipeForge " + PipeForge.version() + " (ABI " + PipeForge.libraryAbiVersion() + ")");
  }

  @Test
  public void version() {
    assertTrue(PipeForge.version().matches("\\d+\\.\\d+\\.\\d+"));
    assertEquals(PipeForge.headerAbiVersion(), PipeForge.libraryAbiVersion());
    assertSame(Tensor.class, Tensor.fromInts(new int[] {1}, 1).getClass());
  }
}

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.util.Arrays;
import org.pipeforge.Batch;
import org.pipeforge.DataLoader;
import org.pipeforge.GptConfig;
import org.pipeforge.Model;
import org.pipeforge.PipeForge;
import org.pipeforge.StepResult;
import org.pipeforge.Tensor;
import org.pipeforge.Trainer;
import org.pipeforge.TrainerOptions;

/**
 * Trains a small GPT as a character-level language model on the licence texts every Debian machine
 * has (/usr/share/common-licenses), through the Java binding. The same model, data and settings as
 * the C sample (samples/train_char_gpt.c), so it prints the same losses and parameter checksum.
 *
 * <pre>bazel run //samples/java:train_char_gpt -- [--steps N] [--text-dir DIR] [--checkpoint FILE]</pre>
 */
public final class TrainCharGpt {
  static final int ROWS = 8, SEQ_LEN = 64, MICRO_BATCHES = 4;

  /** SplitMix64: the window of (position, row) is a pure function of both. */
  static long mix(long z) {
    z += 0x9e3779b97f4a7c15L;
    z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
    z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
    return z ^ (z >>> 31);
  }

  /** Micro-batch {@code position}: ROWS windows of SEQ_LEN + 1 characters at pseudo-random offsets. */
  static final class TextLoader implements DataLoader {
    private final int[] tokens;

    TextLoader(int[] tokens) {
      this.tokens = tokens;
    }

    @Override
    public Batch next(long position) {
      int[] inputs = new int[ROWS * SEQ_LEN];
      int[] targets = new int[ROWS * SEQ_LEN];
      for (int r = 0; r < ROWS; ++r) {
        int start = (int) Long.remainderUnsigned(mix(position * 1000003L + r), tokens.length - SEQ_LEN - 1);
        System.arraycopy(tokens, start, inputs, r * SEQ_LEN, SEQ_LEN);
        System.arraycopy(tokens, start + 1, targets, r * SEQ_LEN, SEQ_LEN);
      }
      return new Batch(Tensor.fromInts(inputs, ROWS, SEQ_LEN), Tensor.fromInts(targets, ROWS, SEQ_LEN));
    }
  }

  /** Every regular file in {@code folder} (sorted by name, links skipped), as one byte array. */
  static byte[] readTexts(File folder) throws IOException {
    String[] names = folder.list();
    if (names == null) throw new IOException("cannot open text folder '" + folder + "'");
    Arrays.sort(names);
    java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
    for (String name : names) {
      File file = new File(folder, name);
      if (name.startsWith(".") || Files.isSymbolicLink(file.toPath()) || !file.isFile()) continue;
      out.write(Files.readAllBytes(file.toPath()));
    }
    return out.toByteArray();
  }

  public static void main(String[] args) throws Exception {
    int steps = 300;
    String textDir = "/usr/share/common-licenses";
    String checkpoint = null;
    for (int i = 0; i < args.length; ++i) {
      if (args[i].equals("--steps") && i + 1 < args.length) {
        steps = Integer.parseInt(args[++i]);
      } else if (args[i].equals("--text-dir") && i + 1 < args.length) {
        textDir = args[++i];
      } else if (args[i].equals("--checkpoint") && i + 1 < args.length) {
        checkpoint = args[++i];
      } else {
        System.err.println("usage: train_char_gpt [--steps N] [--text-dir DIR] [--checkpoint FILE]");
        System.exit(2);
      }
    }
    if (steps < 1) {
      System.err.println("--steps must be >= 1");
      System.exit(2);
    }

    byte[] text = readTexts(new File(textDir));
    if (text.length < 2 * SEQ_LEN) {
      System.err.println("no usable text in '" + textDir + "'");
      System.exit(1);
    }
    // The vocabulary: the sorted distinct bytes.
    int[] idOf = new int[256];
    boolean[] seen = new boolean[256];
    for (byte b : text) seen[b & 0xff] = true;
    int vocab = 0;
    for (int b = 0; b < 256; ++b) idOf[b] = seen[b] ? vocab++ : -1;
    int[] tokens = new int[text.length];
    for (int i = 0; i < text.length; ++i) tokens[i] = idOf[text[i] & 0xff];

    GptConfig config = new GptConfig();
    config.setVocab(vocab);
    config.setSeqLen(SEQ_LEN);
    config.setDModel(64);
    config.setHeads(4);
    config.setLayers(2);
    TrainerOptions options = new TrainerOptions();
    options.setMicroBatches(MICRO_BATCHES);
    options.setSeed(1);
    options.setOptimizer("adamw");
    options.setLr(3e-3f);
    options.setClipNorm(1.0f);

    try (Model model = Model.gpt(config); Trainer trainer = new Trainer(model, options)) {
      trainer.setDataLoader(new TextLoader(tokens));
      System.out.printf("PipeForge %s: character GPT (%d parameters, vocabulary %d) on %s, %d characters%n",
          PipeForge.version(), model.numParameterElements(), vocab, textDir, tokens.length);
      System.out.printf("%d steps of %d micro-batches x %d sequences x %d characters%n", steps, MICRO_BATCHES,
          ROWS, SEQ_LEN);
      double first = 0, loss = 0;
      for (int step = 1; step <= steps; ++step) {
        StepResult result = trainer.stepFromLoader();
        loss = result.getLoss();
        if (step == 1) first = loss;
        if (step == 1 || step % 25 == 0 || step == steps) {
          double speed = result.getSeconds() > 0 ? result.getTokens() / result.getSeconds() : 0;
          System.out.printf("step %4d  loss %.4f  %7.0f tok/s%n", step, loss, speed);
        }
      }
      if (checkpoint != null) trainer.saveCheckpoint(checkpoint);
      System.out.printf("loss %.4f -> %.4f; parameter checksum %s%n", first, loss, trainer.checksum());
      if (!(loss < first)) System.exit(1);
    }
  }
}

import org.pipeforge.*;

/**
 * What a user compiles against the jar alone: trains an MLP with 1F1B on two ranks for 30 steps,
 * then asks for a trainer on cuda:0 and prints why not ("cuda: ..."), which shows whether the CUDA
 * backend inside the jar was found.
 */
public class TrainInstalled {
  public static void main(String[] args) {
    float[] x = new float[16 * 8];
    int[] y = new int[16];
    for (int i = 0; i < x.length; ++i) x[i] = (float) ((i * 7 % 11) / 11.0 - 0.5);
    for (int r = 0; r < 16; ++r) y[r] = x[r * 8] > x[r * 8 + 1] ? 1 : 0;
    MlpConfig config = new MlpConfig();
    config.setInputDim(8);
    config.setHidden(32);
    config.setClasses(2);
    TrainerOptions options = new TrainerOptions();
    options.setMicroBatches(4);
    options.setLr(1e-2f);
    options.setSchedule("1f1b");
    options.setStages(2);
    try (Model model = Model.mlp(config); Trainer trainer = new Trainer(model, options)) {
      double first = trainer.step(Tensor.fromFloats(x, 16, 8), Tensor.fromInts(y, 16)).getLoss(), last = first;
      for (int step = 1; step < 30; ++step) last = trainer.step(Tensor.fromFloats(x, 16, 8), Tensor.fromInts(y, 16)).getLoss();
      System.out.printf("pipeforge %s: loss %.4f -> %.4f%n", PipeForge.version(), first, last);
      if (!(last < first)) System.exit(1);
    }
    TrainerOptions cuda = new TrainerOptions();
    cuda.setDevices("cuda:0");
    try (Model model = Model.mlp(config); Trainer trainer = new Trainer(model, cuda)) {
      System.out.println("cuda: a trainer on cuda:0");
    } catch (PipeForgeException e) {
      System.out.println("cuda: " + e.getMessage());
    }
  }
}

package org.pipeforge;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.CodeSource;
import java.util.ArrayList;
import java.util.List;

/**
 * Loads the JNI library (libpipeforge_jni.so, which links libpipeforge.so.&lt;abi&gt;) once, before
 * the first native call, and checks that the runtime has the ABI this binding was built for. Where
 * from, the first that exists:
 *
 * <ol>
 *   <li>the path in the system property {@code pipeforge.jni.library};
 *   <li>the libraries inside the jar ({@code org/pipeforge/native/linux-x86_64/}, listed in its
 *       {@code natives.txt}): copied into a fresh temporary folder, deleted at exit, and loaded from
 *       there (libpipeforge_jni.so finds libpipeforge.so.&lt;abi&gt; beside it through its
 *       {@code $ORIGIN} run path), so {@code java -cp pipeforge.jar:. Main} needs nothing else;
 *   <li>libpipeforge_jni.so next to the jar (or class folder) this class came from;
 *   <li>{@code System.loadLibrary("pipeforge_jni")}, i.e. java.library.path.
 * </ol>
 */
final class NativeLibrary {
  static final String PROPERTY = "pipeforge.jni.library";
  static final String FILE_NAME = "libpipeforge_jni.so";
  static final String PLATFORM = "linux-x86_64";
  static final String RESOURCES = "/org/pipeforge/native/" + PLATFORM + "/";

  private NativeLibrary() {}

  static void load() {
    String explicit = System.getProperty(PROPERTY);
    if (explicit != null && !explicit.isEmpty()) {
      System.load(new File(explicit).getAbsolutePath());
    } else {
      File bundled = extractBundled();
      File beside = besideCodeSource();
      if (bundled != null) {
        System.load(bundled.getAbsolutePath());
      } else if (beside != null && beside.isFile()) {
        System.load(beside.getAbsolutePath());
      } else {
        System.loadLibrary("pipeforge_jni");
      }
    }
    int library = PipeForgeJNI.libraryAbiVersion();
    int header = PipeForgeJNI.headerAbiVersion();
    if (library != header) {
      throw new UnsatisfiedLinkError("libpipeforge.so has ABI version " + library + " (version "
          + PipeForgeJNI.version() + ") but org.pipeforge was built for ABI version " + header);
    }
  }

  /** The extracted libpipeforge_jni.so, or null when the jar holds no native libraries. */
  private static File extractBundled() {
    List<String> names = bundledNames();
    if (names == null) return null;
    String platform = System.getProperty("os.name", "").toLowerCase().replace(" ", "") + "-"
        + System.getProperty("os.arch", "").replace("amd64", "x86_64");
    if (!platform.equals(PLATFORM)) {
      throw new UnsatisfiedLinkError("pipeforge.jar holds native libraries for " + PLATFORM
          + " only, and this JVM runs on " + platform + "; set -D" + PROPERTY + "=PATH to a libpipeforge_jni.so");
    }
    try {
      Path folder = Files.createTempDirectory("pipeforge-");
      folder.toFile().deleteOnExit();  // registered first, so deleted after the files in it
      File jni = null;
      for (String name : names) {
        Path target = folder.resolve(name);
        try (InputStream in = NativeLibrary.class.getResourceAsStream(RESOURCES + name)) {
          if (in == null) throw new IOException("natives.txt lists " + name + " but the jar lacks it");
          Files.copy(in, target, StandardCopyOption.REPLACE_EXISTING);
        }
        target.toFile().deleteOnExit();
        if (name.equals(FILE_NAME)) jni = target.toFile();
      }
      if (jni == null) throw new IOException("natives.txt does not list " + FILE_NAME);
      return jni;
    } catch (IOException e) {
      UnsatisfiedLinkError error = new UnsatisfiedLinkError(
          "cannot extract PipeForge's native libraries from the jar to a temporary folder ("
          + System.getProperty("java.io.tmpdir") + "): " + e.getMessage());
      error.initCause(e);
      throw error;
    }
  }

  private static List<String> bundledNames() {
    try (InputStream in = NativeLibrary.class.getResourceAsStream(RESOURCES + "natives.txt")) {
      if (in == null) return null;
      List<String> names = new ArrayList<>();
      for (String line : new String(in.readAllBytes(), StandardCharsets.UTF_8).split("\n")) {
        if (!line.trim().isEmpty()) names.add(line.trim());
      }
      return names;
    } catch (IOException e) {
      return null;
    }
  }

  private static File besideCodeSource() {
    try {
      CodeSource source = NativeLibrary.class.getProtectionDomain().getCodeSource();
      if (source == null || source.getLocation() == null) return null;
      File location = new File(source.getLocation().toURI());
      File folder = location.isDirectory() ? location : location.getParentFile();
      return folder == null ? null : new File(folder, FILE_NAME);
    } catch (URISyntaxException | SecurityException e) {
      return null;
    }
  }
}

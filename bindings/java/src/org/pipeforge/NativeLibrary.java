package org.pipeforge;

import java.io.File;
import java.net.URISyntaxException;
import java.security.CodeSource;

/**
 * Loads the JNI library (libpipeforge_jni.so, which links libpipeforge.so) once, before the first
 * native call, and checks that the runtime has the ABI this binding was built for. Where from:
 *
 * <ol>
 *   <li>the path in the system property {@code pipeforge.jni.library}, if set;
 *   <li>libpipeforge_jni.so next to the jar (or class folder) this class came from;
 *   <li>{@code System.loadLibrary("pipeforge_jni")}, i.e. java.library.path.
 * </ol>
 *
 * libpipeforge_jni.so finds libpipeforge.so through its run path (as Bazel builds it) or
 * LD_LIBRARY_PATH.
 */
final class NativeLibrary {
  static final String PROPERTY = "pipeforge.jni.library";
  static final String FILE_NAME = "libpipeforge_jni.so";

  private NativeLibrary() {}

  static void load() {
    String explicit = System.getProperty(PROPERTY);
    if (explicit != null && !explicit.isEmpty()) {
      System.load(new File(explicit).getAbsolutePath());
    } else {
      File beside = besideCodeSource();
      if (beside != null && beside.isFile()) {
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

// RecordImportTest: the generated dev.stepwell.v1.Record beside java.lang.Record, as the README's
// "Wildcard imports and Record" says: both wildcard imports plus a single-type import compile.
package dev.stepwell;

import static org.junit.jupiter.api.Assertions.*;

import dev.stepwell.v1.*;
import dev.stepwell.v1.Record;
import java.io.File;
import java.io.IOException;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import javax.tools.Diagnostic;
import javax.tools.DiagnosticCollector;
import javax.tools.JavaCompiler;
import javax.tools.JavaFileObject;
import javax.tools.StandardJavaFileManager;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code Record} names two types for a file that imports {@code dev.stepwell.v1.*}: the contract's
 * message {@code stepwell.v1.Record} and {@code java.lang.Record}, imported on demand as well. The
 * contract (and so every language's stubs) keeps the name; a Java file that wants the message
 * imports it by name, which shadows {@code java.lang.Record}. This file is such a file; the test
 * also compiles a user's file both ways with the JDK's compiler, against this build's classes.
 */
class RecordImportTest {
  private static final String HEADER =
      "package example;\nimport dev.stepwell.*;\nimport dev.stepwell.v1.*;\n";
  private static final String BODY =
      "public class UsesRecord {\n"
          + "  public static Record make() {\n"
          + "    return Record.newBuilder().setTurnId(\"t\").setKind(\"note\").build();\n"
          + "  }\n"
          + "  record Point(int x, int y) {}\n" // a Java record still compiles beside it
          + "}\n";

  @TempDir Path dir;

  @Test
  void thisFileUsesTheMessageUnqualified() {
    Record r = Record.newBuilder().setTurnId("t").setKind("note").build();
    assertEquals("dev.stepwell.v1.Record", r.getClass().getName());
    assertEquals("note", r.getKind());
    record Point(int x, int y) {}
    assertTrue(java.lang.Record.class.isAssignableFrom(Point.class));
  }

  @Test
  void aSingleTypeImportMakesRecordTheMessage() throws Exception {
    List<Diagnostic<? extends JavaFileObject>> errors =
        compile(HEADER + "import dev.stepwell.v1.Record;\n" + BODY);
    assertEquals(List.of(), errors, "the README's imports must compile");
  }

  @Test
  void theWildcardsAloneLeaveRecordAmbiguous() throws Exception {
    List<Diagnostic<? extends JavaFileObject>> errors = compile(HEADER + BODY);
    String messages =
        errors.stream().map(d -> d.getMessage(Locale.ROOT)).collect(Collectors.joining("\n"));
    assertTrue(messages.contains("reference to Record is ambiguous"), messages);
  }

  /** Compiles {@code source} as example/UsesRecord.java; its errors. */
  private List<Diagnostic<? extends JavaFileObject>> compile(String source)
      throws IOException, URISyntaxException {
    JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
    assertNotNull(javac, "the tests run on a JDK");
    Path file = dir.resolve("example/UsesRecord.java");
    Files.createDirectories(file.getParent());
    Files.writeString(file, source);
    String classpath =
        Stream.of(Record.class, com.google.protobuf.Message.class, StepwellClient.class)
            .map(RecordImportTest::location)
            .distinct()
            .collect(Collectors.joining(File.pathSeparator));
    DiagnosticCollector<JavaFileObject> diagnostics = new DiagnosticCollector<>();
    try (StandardJavaFileManager files = javac.getStandardFileManager(diagnostics, Locale.ROOT, null)) {
      List<String> options = List.of("-proc:none", "-d", dir.resolve("out").toString(), "-cp", classpath);
      javac.getTask(null, files, diagnostics, options, null, files.getJavaFileObjects(file)).call();
    }
    return diagnostics.getDiagnostics().stream()
        .filter(d -> d.getKind() == Diagnostic.Kind.ERROR)
        .toList();
  }

  /** The directory or jar a class was loaded from. */
  private static String location(Class<?> type) {
    try {
      return Path.of(type.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
    } catch (URISyntaxException e) {
      throw new IllegalStateException(e);
    }
  }
}

// ScenarioTest: runs the language-neutral scenarios of clients/scenarios against live sidecars.
package dev.stepwell;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.node.TextNode;
import com.google.protobuf.Message;
import com.google.protobuf.util.JsonFormat;
import dev.stepwell.v1.AwaitRequest;
import dev.stepwell.v1.BeginRequest;
import dev.stepwell.v1.CancelWaitRequest;
import dev.stepwell.v1.CheckpointRequest;
import dev.stepwell.v1.CompleteRequest;
import dev.stepwell.v1.CreateWaitRequest;
import dev.stepwell.v1.DeleteTurnRequest;
import dev.stepwell.v1.ExtendRequest;
import dev.stepwell.v1.GetRequest;
import dev.stepwell.v1.GetWaitRequest;
import dev.stepwell.v1.ListTurnsRequest;
import dev.stepwell.v1.ListWaitsRequest;
import dev.stepwell.v1.ReleaseRequest;
import dev.stepwell.v1.RestoreRequest;
import dev.stepwell.v1.SignalRequest;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Instant;
import java.util.Base64;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Runs every scenario of ../scenarios/*.json against a sidecar, per scenarios/README.md: RPC steps
 * through the client's one-to-one layer without retries, adapter steps through a {@link
 * CheckpointStore} per worker (each with its own client and a clock the steps set), sidecar steps
 * against a sidecar of the scenario's own, killed and started again on its SQLite file, and worker
 * steps through {@link ScenarioWorker} processes, with a peer of another language (the command
 * line in {@code STEPWELL_SCENARIO_PEER}) for signals.
 *
 * <p>A scenario with worker or peer steps also runs on a sidecar of its own, always plaintext
 * without auth: the worker programs of every language take only {@code --target}, so in the
 * second pass of ./test (TLS and tokens) they could not reach the shared sidecar.
 */
@ExtendWith(Sidecar.Extension.class)
class ScenarioTest {
  private static final ObjectMapper M = new ObjectMapper();
  private static final Path DIR = Paths.get(System.getProperty("basedir", "."), "..", "scenarios");

  @TestFactory
  Stream<DynamicTest> scenarios() throws IOException {
    List<Path> files;
    try (Stream<Path> s = Files.list(DIR)) {
      files = s.filter(p -> p.toString().endsWith(".json")).sorted().toList();
    }
    assertTrue(files.size() >= 7, "scenario files found in " + DIR.toAbsolutePath());
    return files.stream()
        .map(f -> DynamicTest.dynamicTest(f.getFileName().toString(), () -> run(f)));
  }

  /** One worker of adapter steps: its clock and its adapter, sharing nothing with the others. */
  private record Worker(SetClock clock, CheckpointStore store) {}

  private void run(Path file) throws Exception {
    JsonNode scenario = M.readTree(file.toFile());
    String name = scenario.get("name").asText();
    String ns = "sc-" + name.replace('_', '-') + "-" + UUID.randomUUID().toString().substring(0, 8);
    Map<String, JsonNode> saved = new HashMap<>();
    boolean sidecarSteps = false;
    boolean processSteps = false;
    List<String> workerNames = new java.util.ArrayList<>();
    for (JsonNode step : scenario.get("steps")) {
      if (step.has("sidecar")) sidecarSteps = true;
      if (isProcessStep(step) && !step.has("effects")) processSteps = true;
      if (step.has("adapter") && !workerNames.contains(step.get("worker").asText())) {
        workerNames.add(step.get("worker").asText());
      }
    }
    boolean ownSidecar = sidecarSteps || processSteps;
    Sidecar sidecar = processSteps ? Sidecar.ownPlaintext() : sidecarSteps ? Sidecar.own() : null;
    Path effects = Files.createTempFile("stepwell-effects-", ".txt");
    Map<String, WorkerProcess> processes = new HashMap<>();
    // The scenario's client and every worker's are made once, before the first step.
    Map<String, StepwellClient> workerClients = new LinkedHashMap<>();
    try (StepwellClient client = ownSidecar ? sidecar.builder().build() : Sidecar.client()) {
      for (String w : workerNames) {
        workerClients.put(w, ownSidecar ? sidecar.builder().build() : Sidecar.client());
      }
      StepwellClient raw = client.withRetry(RetryPolicy.NONE);
      Map<String, Worker> workers = new HashMap<>();
      int i = 0;
      for (JsonNode step : scenario.get("steps")) {
        i++;
        if (isProcessStep(step)) {
          String where = name + " step " + i;
          String target = sidecar == null ? Sidecar.target() : sidecar.target;
          processStep(step, new Scene(target, ns, effects, processes), where);
        } else if (step.has("adapter")) {
          String where = name + " step " + i + " (adapter " + step.get("adapter").asText() + ")";
          Worker w =
              workers.computeIfAbsent(
                  step.get("worker").asText(),
                  n -> {
                    SetClock clock = new SetClock();
                    return new Worker(
                        clock, new CheckpointStore(workerClients.get(n).withNamespace(ns), clock));
                  });
          adapterStep(w, step, where);
        } else if (step.has("sidecar")) {
          sidecarStep(sidecar, step.get("sidecar").asText(), name + " step " + i);
        } else {
          String where = name + " step " + i + " (" + step.get("call").asText() + ")";
          runStep(raw, step, ns, saved, where);
        }
      }
    } finally {
      for (WorkerProcess p : processes.values()) p.kill();
      for (StepwellClient c : workerClients.values()) c.close();
      if (sidecar != null) sidecar.close();
      Files.deleteIfExists(effects);
    }
  }

  // ---------------------------------------------------------------- worker steps

  /** What a worker or peer step needs: the sidecar, the namespace, the effects file, the workers. */
  private record Scene(String target, String ns, Path effects, Map<String, WorkerProcess> workers) {}

  /** How long a worker step waits when the scenario names no timeoutMs. */
  private static final long PROCESS_TIMEOUT_MS = 60_000;

  /** A worker step ({@code start}, {@code line}, {@code kill}, {@code exit}), a peer signal, or effects. */
  private void processStep(JsonNode step, Scene scene, String where) throws Exception {
    long timeoutMs = step.has("timeoutMs") ? step.get("timeoutMs").asLong() : PROCESS_TIMEOUT_MS;
    if (step.has("signal")) {
      peerSignal(step, scene, timeoutMs, where);
      return;
    }
    if (step.has("effects")) {
      long lines = Files.exists(scene.effects()) ? Files.readAllLines(scene.effects()).size() : 0;
      assertEquals(step.get("effects").asLong(), lines, where + ": lines in the effects file");
      return;
    }
    String worker = step.get("worker").asText();
    where = where + " (worker " + worker + ")";
    if (step.has("start")) {
      WorkerProcess old = scene.workers().get(worker);
      if (old != null) old.kill();
      scene.workers().put(worker, WorkerProcess.start(workerCommand(step, scene), where));
      return;
    }
    WorkerProcess p = scene.workers().get(worker);
    if (p == null) fail(where + ": no such worker was started");
    if (step.has("kill")) {
      p.kill();
    } else if (step.has("exit")) {
      int code = p.awaitExit(timeoutMs, where);
      assertEquals(step.get("exit").asInt(), code, where + ": exit code; " + p.describe());
      if (step.has("line")) {
        assertTrue(p.printed(step.get("line").asText()), where + ": no line " + step.get("line") + "; " + p.describe());
      }
    } else if (step.has("line")) {
      p.awaitLine(step.get("line").asText(), timeoutMs, where);
    } else {
      fail(where + ": unknown worker step " + step);
    }
  }

  /** This language's worker program, {@link ScenarioWorker}, for a {@code start} step. */
  private static List<String> workerCommand(JsonNode step, Scene scene) {
    String kind = step.get("start").asText();
    List<String> cmd = new java.util.ArrayList<>(javaWorker());
    cmd.addAll(
        List.of(
            kind,
            "--target", scene.target(),
            "--namespace", scene.ns(),
            "--run", step.get("run").asText(),
            "--effects", scene.effects().toString()));
    if (step.has("seconds")) cmd.addAll(List.of("--seconds", step.get("seconds").asText()));
    return cmd;
  }

  /** The command line that runs {@link ScenarioWorker} on this JVM's classpath. */
  static List<String> javaWorker() {
    String java = Paths.get(System.getProperty("java.home"), "bin", "java").toString();
    return List.of(java, "-cp", System.getProperty("java.class.path"), ScenarioWorker.class.getName());
  }

  /**
   * Signals through the peer, the worker program of another language whose command line is
   * {@code STEPWELL_SCENARIO_PEER}: a run is signalled by a client it was not written with.
   */
  private static void peerSignal(JsonNode step, Scene scene, long timeoutMs, String where)
      throws Exception {
    String peer = System.getenv("STEPWELL_SCENARIO_PEER");
    if (peer == null || peer.isBlank()) {
      fail(where + ": STEPWELL_SCENARIO_PEER is unset: it must name another language's scenario worker (clients/java/test sets it)");
    }
    JsonNode signal = step.get("signal");
    List<String> cmd = new java.util.ArrayList<>(List.of(peer.trim().split("\\s+")));
    cmd.addAll(
        List.of(
            "signal",
            "--target", scene.target(),
            "--namespace", scene.ns(),
            "--run", signal.get("run").asText(),
            "--name", signal.get("name").asText(),
            "--payload", signal.get("payload").asText()));
    WorkerProcess p = WorkerProcess.start(cmd, where + " (peer)");
    try {
      int code = p.awaitExit(timeoutMs, where + " (peer)");
      assertEquals(0, code, where + ": the peer's exit code; " + p.describe());
      String expect = step.get("expect").asText();
      assertTrue(p.printed(expect), where + ": the peer did not print " + expect + "; " + p.describe());
    } finally {
      p.kill();
    }
  }

  /** A worker or peer process: its stdout, line by line, as it prints, and its stderr in a file. */
  private static final class WorkerProcess {
    private final Process process;
    private final Path stderr;
    private final List<String> lines = new java.util.ArrayList<>(); // guarded by this
    private boolean stdoutClosed; // guarded by this

    private WorkerProcess(Process process, Path stderr) {
      this.process = process;
      this.stderr = stderr;
    }

    static WorkerProcess start(List<String> command, String where) throws IOException {
      Path stderr = Files.createTempFile("stepwell-worker-", ".err");
      Process process;
      try {
        process = new ProcessBuilder(command).redirectError(stderr.toFile()).start();
      } catch (IOException e) {
        throw new IOException(where + ": cannot start " + command, e);
      }
      WorkerProcess p = new WorkerProcess(process, stderr);
      Thread reader = new Thread(p::readStdout, "scenario-worker-stdout");
      reader.setDaemon(true);
      reader.start();
      return p;
    }

    private void readStdout() {
      try (BufferedReader r =
          new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
        for (String line; (line = r.readLine()) != null; ) {
          synchronized (this) {
            lines.add(line);
            notifyAll();
          }
        }
      } catch (IOException e) {
        // the process was killed: what it printed before stays
      } finally {
        synchronized (this) {
          stdoutClosed = true;
          notifyAll();
        }
      }
    }

    /** Waits until the process has printed {@code line}; fails if it exits or the time runs out. */
    synchronized void awaitLine(String line, long timeoutMs, String where) throws InterruptedException {
      long deadline = System.nanoTime() + timeoutMs * 1_000_000;
      while (!lines.contains(line)) {
        if (stdoutClosed) fail(where + ": exited before printing " + line + "; " + describe());
        long left = (deadline - System.nanoTime()) / 1_000_000;
        if (left <= 0) fail(where + ": no line " + line + " in " + timeoutMs + " ms; " + describe());
        wait(left);
      }
    }

    /** Waits for the exit and for the rest of its output; its exit code. */
    int awaitExit(long timeoutMs, String where) throws InterruptedException {
      if (!process.waitFor(timeoutMs, java.util.concurrent.TimeUnit.MILLISECONDS)) {
        fail(where + ": still running after " + timeoutMs + " ms; " + describe());
      }
      synchronized (this) {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (!stdoutClosed && System.nanoTime() < deadline) wait(1000);
      }
      return process.exitValue();
    }

    synchronized boolean printed(String line) {
      return lines.contains(line);
    }

    /** SIGKILL, as a crash would, and its exit awaited; its stderr file goes. */
    void kill() throws InterruptedException {
      process.destroyForcibly();
      if (!process.waitFor(30, java.util.concurrent.TimeUnit.SECONDS)) {
        throw new IllegalStateException("a worker did not exit after SIGKILL");
      }
      try {
        Files.deleteIfExists(stderr);
      } catch (IOException e) {
        // a leftover temporary file is no test failure
      }
    }

    /** What it printed, for failure messages. */
    synchronized String describe() {
      String err;
      try {
        err = Files.readString(stderr);
      } catch (IOException e) {
        err = "(stderr unreadable: " + e + ")";
      }
      return "stdout " + lines + ", stderr:\n" + err;
    }
  }

  /** A sidecar step: stop (SIGKILL), start, or restart the scenario's own sidecar. */
  private static void sidecarStep(Sidecar sidecar, String what, String where) throws Exception {
    switch (what) {
      case "stop" -> sidecar.kill();
      case "start" -> sidecar.startAgain();
      case "restart" -> {
        sidecar.kill();
        sidecar.startAgain();
      }
      default -> fail(where + ": unknown sidecar step " + what);
    }
  }

  /** Whether a step is a worker process's, the peer's, or the effects check. */
  private static boolean isProcessStep(JsonNode step) {
    return step.has("signal") || step.has("effects") || (step.has("worker") && !step.has("adapter"));
  }

  /** An adapter step: sets the worker's clock if given, then save, load or history. */
  private void adapterStep(Worker w, JsonNode step, String where) throws Exception {
    if (step.has("clock")) w.clock().set(Instant.parse(step.get("clock").asText()));
    String run = step.get("run").asText();
    String op = step.get("adapter").asText();
    switch (op) {
      case "save" -> w.store().save(run, step.get("step").asText(), M.writeValueAsString(step.get("state")));
      case "load" -> {
        Optional<RunCheckpoint> got = w.store().load(run);
        JsonNode actual = NullNode.getInstance();
        if (got.isPresent()) {
          ObjectNode o = M.createObjectNode();
          o.put("step", got.get().step());
          o.set("state", M.readTree(got.get().stateJson()));
          actual = o;
        }
        if (step.has("expect")) {
          JsonNode expect = step.get("expect");
          boolean ok = expect.isNull() ? actual.isNull() : !actual.isNull() && matches(expect, actual);
          assertTrue(ok, where + ": expected " + expect + "\n got " + actual);
        }
      }
      case "history" -> {
        ObjectNode actual = M.createObjectNode();
        ArrayNode steps = actual.putArray("steps");
        for (RunCheckpoint c : w.store().history(run)) steps.add(c.step());
        if (step.has("expect")) {
          assertTrue(
              matches(step.get("expect"), actual),
              where + ": expected " + step.get("expect") + "\n got " + actual);
        }
      }
      default -> fail(where + ": unknown adapter step " + op);
    }
  }

  private void runStep(
      StepwellClient raw, JsonNode step, String ns, Map<String, JsonNode> saved, String where)
      throws Exception {
    String call = step.get("call").asText();
    ObjectNode request = (ObjectNode) substitute(step.get("request").deepCopy(), saved);
    if (request.has("namespace")) {
      request.put("namespace", request.get("namespace").asText().replace("$ns", ns));
    } else {
      request.put("namespace", ns);
    }
    if (call.equals("Checkpoint") && request.has("state")) {
      request.put("state", b64(M.writeValueAsBytes(request.get("state"))));
    }
    for (String f : List.of("result", "fingerprint", "payload")) {
      if (request.has(f) && request.get(f).isTextual()) {
        request.put(f, b64(request.get(f).asText().getBytes(StandardCharsets.UTF_8)));
      }
    }
    String json = M.writeValueAsString(request);

    if (step.has("until")) {
      long timeout = step.has("timeoutMs") ? step.get("timeoutMs").asLong() : 5000;
      long deadline = System.nanoTime() + timeout * 1_000_000;
      while (true) {
        JsonNode last = null;
        try {
          last = invoke(raw, call, json);
        } catch (StepwellException e) {
          // not matching yet
        }
        if (last != null && matches(step.get("until"), last)) break;
        if (System.nanoTime() > deadline) {
          fail(where + ": until " + step.get("until") + " not reached in " + timeout + " ms; last " + last);
        }
        Thread.sleep(20);
      }
    }

    if (step.has("until") && !step.has("expect") && !step.has("save") && !step.has("expectError")) {
      return;
    }
    // retryWhile: repeat while the call fails with that code, at most timeoutMs.
    String retryWhile = step.has("retryWhile") ? step.get("retryWhile").asText() : null;
    long timeout = step.has("timeoutMs") ? step.get("timeoutMs").asLong() : 5000;
    long deadline = System.nanoTime() + timeout * 1_000_000;
    JsonNode response = null;
    StepwellException error;
    while (true) {
      try {
        response = invoke(raw, call, json);
        error = null;
      } catch (StepwellException e) {
        error = e;
      }
      if (retryWhile == null
          || error == null
          || !error.code().name().equals(retryWhile)
          || System.nanoTime() > deadline) {
        break;
      }
      Thread.sleep(20);
    }

    if (step.has("expectError")) {
      JsonNode ee = step.get("expectError");
      if (error == null) fail(where + ": expected " + ee + ", got OK " + response);
      assertEquals(ee.get("code").asText(), error.code().name(), where + ": code; " + error);
      if (ee.has("reason")) assertEquals(ee.get("reason").asText(), error.reason(), where + ": reason; " + error);
      if (ee.has("field")) assertEquals(ee.get("field").asText(), error.field(), where + ": field; " + error);
      return;
    }
    if (error != null) throw error;
    if (step.has("expect")) {
      assertTrue(
          matches(step.get("expect"), response),
          where + ": expected " + step.get("expect") + "\n got " + response);
    }
    if (step.has("save")) {
      Iterator<Map.Entry<String, JsonNode>> it = step.get("save").fields();
      while (it.hasNext()) {
        Map.Entry<String, JsonNode> e = it.next();
        JsonNode v = response.get(e.getValue().asText());
        saved.put(e.getKey(), v == null ? TextNode.valueOf("") : v);
      }
    }
  }

  /** Calls the RPC with the JSON request; returns the response in JSON mapping, converted. */
  private JsonNode invoke(StepwellClient c, String call, String json) throws Exception {
    Message response =
        switch (call) {
          case "Checkpoint" -> c.checkpoint((CheckpointRequest) parse(json, CheckpointRequest.newBuilder()));
          case "Restore" -> c.restore((RestoreRequest) parse(json, RestoreRequest.newBuilder()));
          case "ListTurns" -> c.listTurns((ListTurnsRequest) parse(json, ListTurnsRequest.newBuilder()));
          case "DeleteTurn" -> c.deleteTurn((DeleteTurnRequest) parse(json, DeleteTurnRequest.newBuilder()));
          case "Begin" -> c.begin((BeginRequest) parse(json, BeginRequest.newBuilder()));
          case "Complete" -> c.complete((CompleteRequest) parse(json, CompleteRequest.newBuilder()));
          case "Release" -> c.release((ReleaseRequest) parse(json, ReleaseRequest.newBuilder()));
          case "Extend" -> c.extend((ExtendRequest) parse(json, ExtendRequest.newBuilder()));
          case "Get" -> c.get((GetRequest) parse(json, GetRequest.newBuilder()));
          case "CreateWait" -> c.createWait((CreateWaitRequest) parse(json, CreateWaitRequest.newBuilder()));
          case "Signal" -> c.signal((SignalRequest) parse(json, SignalRequest.newBuilder()));
          case "Await" -> c.await((AwaitRequest) parse(json, AwaitRequest.newBuilder()));
          case "GetWait" -> c.getWait((GetWaitRequest) parse(json, GetWaitRequest.newBuilder()));
          case "ListWaits" -> c.listWaits((ListWaitsRequest) parse(json, ListWaitsRequest.newBuilder()));
          case "CancelWait" -> c.cancelWait((CancelWaitRequest) parse(json, CancelWaitRequest.newBuilder()));
          default -> throw new IllegalArgumentException("unknown call " + call);
        };
    JsonNode node = M.readTree(JsonFormat.printer().print(response));
    convert(node, call.equals("Checkpoint") || call.equals("Restore"));
    return node;
  }

  private static Message parse(String json, Message.Builder builder) throws Exception {
    JsonFormat.parser().merge(json, builder);
    return builder.build();
  }

  /** state (checkpoints) base64 → parsed JSON; result/fingerprint/payload base64 → UTF-8 string. */
  private static void convert(JsonNode node, boolean checkpointState) throws IOException {
    if (node instanceof ObjectNode o) {
      Iterator<Map.Entry<String, JsonNode>> it = o.fields();
      List<String> names = new java.util.ArrayList<>();
      it.forEachRemaining(e -> names.add(e.getKey()));
      for (String k : names) {
        JsonNode v = o.get(k);
        if (checkpointState && k.equals("state") && v.isTextual()) {
          o.set(k, M.readTree(Base64.getDecoder().decode(v.asText())));
        } else if ((k.equals("result") || k.equals("fingerprint") || k.equals("payload"))
            && v.isTextual()) {
          o.put(k, new String(Base64.getDecoder().decode(v.asText()), StandardCharsets.UTF_8));
        } else {
          convert(v, checkpointState);
        }
      }
    } else if (node instanceof ArrayNode a) {
      for (JsonNode v : a) convert(v, checkpointState);
    }
  }

  private static JsonNode substitute(JsonNode node, Map<String, JsonNode> saved) {
    if (node.isTextual() && node.asText().startsWith("$") && saved.containsKey(node.asText().substring(1))) {
      return saved.get(node.asText().substring(1));
    }
    if (node instanceof ObjectNode o) {
      List<String> names = new java.util.ArrayList<>();
      o.fieldNames().forEachRemaining(names::add);
      for (String k : names) o.set(k, substitute(o.get(k), saved));
    } else if (node instanceof ArrayNode a) {
      for (int i = 0; i < a.size(); i++) a.set(i, substitute(a.get(i), saved));
    }
    return node;
  }

  /** Subset match with proto3 defaults for omitted fields. */
  static boolean matches(JsonNode expected, JsonNode actual) {
    if (actual == null || actual.isMissingNode() || actual.isNull()) {
      return isDefault(expected);
    }
    if (expected.isObject()) {
      if (!actual.isObject()) return false;
      Iterator<Map.Entry<String, JsonNode>> it = expected.fields();
      while (it.hasNext()) {
        Map.Entry<String, JsonNode> e = it.next();
        if (!matches(e.getValue(), actual.get(e.getKey()))) return false;
      }
      return true;
    }
    if (expected.isArray()) {
      if (!actual.isArray() || actual.size() != expected.size()) return false;
      for (int i = 0; i < expected.size(); i++) {
        if (!matches(expected.get(i), actual.get(i))) return false;
      }
      return true;
    }
    if (expected.isNumber() || actual.isNumber()) {
      try {
        return new BigDecimal(expected.asText()).compareTo(new BigDecimal(actual.asText())) == 0;
      } catch (NumberFormatException e) {
        return false;
      }
    }
    return expected.equals(actual);
  }

  private static boolean isDefault(JsonNode v) {
    if (v.isBoolean()) return !v.asBoolean();
    if (v.isNumber()) return v.asDouble() == 0;
    if (v.isTextual()) return v.asText().isEmpty() || v.asText().equals("0");
    if (v.isArray()) return v.size() == 0;
    if (v.isObject()) {
      Iterator<JsonNode> it = v.elements();
      while (it.hasNext()) if (!isDefault(it.next())) return false;
      return true;
    }
    return v.isNull();
  }

  private static String b64(byte[] b) {
    return Base64.getEncoder().encodeToString(b);
  }
}

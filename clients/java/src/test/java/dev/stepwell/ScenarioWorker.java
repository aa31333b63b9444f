// ScenarioWorker: the Java scenario worker program of clients/scenarios/README.md (approval, sleep, signal).
package dev.stepwell;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Instant;
import java.util.HashMap;
import java.util.Map;

/**
 * A run that outlives its worker, as the worker scenarios drive it: {@code approval} pauses for a
 * person's signal, {@code sleep} sleeps durably, and {@code signal} settles a wait from outside,
 * each through the client's public calls, as a user's program would. The scenario runners of every
 * language start it as a child process (another language's runner as its peer), kill it while it
 * waits, and start it again; it prints one line per stage so that they know where it is.
 *
 * <pre>
 * ScenarioWorker approval --target HOST:PORT --namespace NS --run RUN --effects FILE
 * ScenarioWorker sleep    --target HOST:PORT --namespace NS --run RUN --effects FILE --seconds S
 * ScenarioWorker signal   --target HOST:PORT --namespace NS --run RUN --name NAME --payload TEXT
 * </pre>
 */
public final class ScenarioWorker {
  private ScenarioWorker() {}

  public static void main(String[] args) {
    int code;
    try {
      code = run(args);
    } catch (RuntimeException e) {
      System.err.println("scenario worker: " + e);
      code = 1;
    }
    System.out.flush();
    // exit, not return: the client's threads must not keep a finished worker alive.
    System.exit(code);
  }

  private static int run(String[] args) {
    if (args.length < 1) return usage("no subcommand");
    Map<String, String> flags = flags(args);
    try (StepwellClient client = StepwellClient.connect(need(flags, "target"))) {
      StepwellClient c = client.withNamespace(need(flags, "namespace"));
      String run = need(flags, "run");
      switch (args[0]) {
        case "approval" -> approval(c, run, Path.of(need(flags, "effects")));
        case "sleep" ->
            sleep(c, run, Path.of(need(flags, "effects")), Long.parseLong(need(flags, "seconds")));
        case "signal" -> {
          byte[] payload = need(flags, "payload").getBytes(StandardCharsets.UTF_8);
          boolean settled = c.signal(run, need(flags, "name"), payload);
          say(settled ? "settled" : "repeat");
        }
        default -> {
          return usage("unknown subcommand " + args[0]);
        }
      }
    }
    return 0;
  }

  /** A run that pauses for a person: waits for "approve", then runs its effect once. */
  private static void approval(StepwellClient c, String run, Path effects) {
    if (c.latest(run).isEmpty()) c.checkpoint(run, "waiting", Map.of("wait", "approve"));
    c.createWait(run, "approve");
    say("waiting");
    String payload = new String(c.waitForSignal(run, "approve"), StandardCharsets.UTF_8);
    String result = effect(c, run, effects, payload);
    c.checkpoint(run, "done", Map.of("result", result));
    say("done " + result);
  }

  /** A run that sleeps durably: the first worker's wake-up time stands for every later one. */
  private static void sleep(StepwellClient c, String run, Path effects, long seconds) {
    if (c.latest(run).isEmpty()) c.checkpoint(run, "sleeping", Map.of("wait", "nap"));
    Instant wake = Instant.now().plusSeconds(seconds);
    c.createWait(
        dev.stepwell.v1.CreateWaitRequest.newBuilder()
            .setTurnId(run)
            .setName("nap")
            .setResolveAt(StepwellClient.timestamp(wake))
            .build());
    say("sleeping");
    c.sleepUntil(run, "nap", wake);
    String result = effect(c, run, effects, "");
    c.checkpoint(run, "woke", Map.of("result", result));
    say("woke");
  }

  /** The run's effect, at most once however often its workers die: one line appended to FILE. */
  private static String effect(StepwellClient c, String run, Path effects, String payload) {
    return c.once(
        run + "/effect",
        String.class,
        () -> {
          try {
            Files.writeString(
                effects,
                run + " " + payload + "\n",
                StandardCharsets.UTF_8,
                StandardOpenOption.CREATE,
                StandardOpenOption.APPEND);
          } catch (IOException e) {
            throw new UncheckedIOException(e);
          }
          return "done:" + payload;
        });
  }

  private static void say(String line) {
    System.out.println(line);
    System.out.flush();
  }

  /** --name value pairs after the subcommand. */
  private static Map<String, String> flags(String[] args) {
    Map<String, String> out = new HashMap<>();
    for (int i = 1; i + 1 < args.length; i += 2) {
      if (!args[i].startsWith("--")) throw new IllegalArgumentException("not a flag: " + args[i]);
      out.put(args[i].substring(2), args[i + 1]);
    }
    return out;
  }

  private static String need(Map<String, String> flags, String name) {
    String v = flags.get(name);
    if (v == null) throw new IllegalArgumentException("missing --" + name);
    return v;
  }

  private static int usage(String why) {
    System.err.println("scenario worker: " + why + "; usage: approval|sleep|signal --target HOST:PORT ...");
    return 2;
  }
}

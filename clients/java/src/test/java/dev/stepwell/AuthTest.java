package dev.stepwell;

import static org.junit.jupiter.api.Assertions.*;

import com.google.protobuf.Any;
import com.google.rpc.ErrorInfo;
import dev.stepwell.v1.BeginRequest;
import dev.stepwell.v1.CheckpointRequest;
import dev.stepwell.v1.CheckpointServiceGrpc;
import dev.stepwell.v1.CompleteRequest;
import dev.stepwell.v1.DeleteTurnRequest;
import dev.stepwell.v1.ExtendRequest;
import dev.stepwell.v1.GetRequest;
import dev.stepwell.v1.IdempotencyServiceGrpc;
import dev.stepwell.v1.ListTurnsRequest;
import dev.stepwell.v1.ReleaseRequest;
import dev.stepwell.v1.RestoreRequest;
import dev.stepwell.v1.TurnStatus;
import dev.stepwell.v1.WaitServiceGrpc;
import io.grpc.Grpc;
import io.grpc.InsecureServerCredentials;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerCredentials;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import io.grpc.TlsServerCredentials;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.protobuf.StatusProto;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.cert.X509Certificate;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;
import org.junit.jupiter.api.io.TempDir;
import javax.net.ssl.SSLPeerUnverifiedException;
import javax.net.ssl.SSLSession;

/**
 * The token against an in-process server that answers every call with the status under test and
 * records the authorization header of each: the token rides on every call (once() included), is
 * never retried on UNAUTHENTICATED or PERMISSION_DENIED, and shows up in no exception or printed
 * client.
 */
class AuthTest {
  private static final String TOKEN = "tok-5e1b9d2a7c3f4e80";
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  /** The authorization headers of the calls that arrived, in order ("" for none). */
  private final List<String> arrived = new CopyOnWriteArrayList<>();

  /** The subject of the client certificate of each call that came over TLS. */
  private final List<String> peers = new CopyOnWriteArrayList<>();

  private Server server;

  private String startFake(Status.Code code, String reason) throws Exception {
    return startFake(code, reason, InsecureServerCredentials.create());
  }

  private String startFake(Status.Code code, String reason, ServerCredentials creds)
      throws Exception {
    com.google.rpc.Status answer =
        com.google.rpc.Status.newBuilder()
            .setCode(code.value())
            .setMessage("rejected by the fake sidecar")
            .addDetails(
                Any.pack(
                    ErrorInfo.newBuilder()
                        .setReason(reason)
                        .setDomain(StepwellException.DOMAIN)
                        .build()))
            .build();
    ServerInterceptor reject =
        new ServerInterceptor() {
          @Override
          public <Q, R> ServerCall.Listener<Q> interceptCall(
              ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
            String auth = headers.get(AUTHORIZATION);
            arrived.add(auth == null ? "" : auth);
            SSLSession tls = call.getAttributes().get(Grpc.TRANSPORT_ATTR_SSL_SESSION);
            if (tls != null) {
              try {
                peers.add(((X509Certificate) tls.getPeerCertificates()[0]).getSubjectX500Principal().getName());
              } catch (SSLPeerUnverifiedException e) {
                peers.add("");
              }
            }
            io.grpc.StatusRuntimeException e = StatusProto.toStatusRuntimeException(answer);
            call.close(e.getStatus(), e.getTrailers());
            return new ServerCall.Listener<>() {};
          }
        };
    server =
        NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0), creds)
            .addService(
                ServerInterceptors.intercept(
                    new CheckpointServiceGrpc.CheckpointServiceImplBase() {}, reject))
            .addService(
                ServerInterceptors.intercept(
                    new IdempotencyServiceGrpc.IdempotencyServiceImplBase() {}, reject))
            .addService(
                ServerInterceptors.intercept(new WaitServiceGrpc.WaitServiceImplBase() {}, reject))
            .build()
            .start();
    return "127.0.0.1:" + server.getPort();
  }

  @AfterEach
  void stop() {
    if (server != null) server.shutdownNow();
  }

  /** One of each call the client makes, by name. */
  private static Map<String, Executable> everyCall(StepwellClient c) {
    Map<String, Executable> calls = new LinkedHashMap<>();
    calls.put("checkpoint", () -> c.checkpoint(CheckpointRequest.newBuilder().setTurnId("t").build()));
    calls.put("restore", () -> c.restore(RestoreRequest.newBuilder().setTurnId("t").build()));
    calls.put("restore(turnId)", () -> c.restore("t"));
    calls.put("latest", () -> c.latest("t"));
    calls.put("listTurns", () -> c.listTurns(ListTurnsRequest.getDefaultInstance()));
    calls.put("listTurns(status)", () -> c.listTurns(TurnStatus.TURN_STATUS_OPEN));
    calls.put("deleteTurn", () -> c.deleteTurn(DeleteTurnRequest.newBuilder().setTurnId("t").build()));
    calls.put("begin", () -> c.begin(BeginRequest.newBuilder().setKey("k").build()));
    calls.put("complete", () -> c.complete(CompleteRequest.newBuilder().setKey("k").build()));
    calls.put("release", () -> c.release(ReleaseRequest.newBuilder().setKey("k").build()));
    calls.put("extend", () -> c.extend(ExtendRequest.newBuilder().setKey("k").build()));
    calls.put("get", () -> c.get(GetRequest.newBuilder().setKey("k").build()));
    calls.put("once", () -> c.once("k", () -> "done"));
    calls.put("createWait", () -> c.createWait("t", "w"));
    calls.put("signal", () -> c.signal("t", "w", new byte[0]));
    calls.put("signalHandle", () -> c.signalHandle("h", new byte[0]));
    calls.put("await", () -> c.await(dev.stepwell.v1.AwaitRequest.getDefaultInstance()));
    calls.put("getWait", () -> c.getWait("t", "w"));
    calls.put("listWaits", () -> c.listWaits("t", dev.stepwell.v1.WaitStatus.WAIT_STATUS_PENDING));
    calls.put("cancelWait", () -> c.cancelWait("t", "w"));
    calls.put("waitForSignal", () -> c.waitForSignal("t", "w"));
    calls.put("sleepUntil", () -> c.sleepUntil("t", "w", java.time.Instant.EPOCH));
    return calls;
  }

  private void tokenOnEveryCallTypedNotRetried(
      Status.Code code, String reason, Class<? extends StepwellException> type) throws Exception {
    String target = startFake(code, reason);
    // Retries on every code: the client must still not retry these two.
    RetryPolicy retryAll =
        new RetryPolicy(
            5,
            Duration.ofMillis(1),
            Duration.ofMillis(1),
            1.0,
            0.0,
            java.util.EnumSet.allOf(Status.Code.class));
    try (StepwellClient client = StepwellClient.builder(target).token(TOKEN).build()) {
      StepwellClient c = client.withNamespace("ns").withRetry(retryAll);
      Map<String, Executable> calls = everyCall(c);
      for (Map.Entry<String, Executable> call : calls.entrySet()) {
        StepwellException e = assertThrows(type, call.getValue(), call.getKey());
        assertEquals(code, e.code(), call.getKey());
        assertEquals(reason, e.reason(), call.getKey());
        assertFalse(e.toString().contains(TOKEN), call.getKey() + ": " + e);
      }
      // One arrival per call: nothing was retried, and each carried the token.
      List<String> want = new ArrayList<>();
      for (int i = 0; i < calls.size(); i++) want.add("Bearer " + TOKEN);
      assertEquals(want, arrived);
      assertFalse(client.toString().contains(TOKEN), client.toString());
      assertFalse(c.toString().contains(TOKEN), c.toString());
    }
  }

  @Test
  void unauthenticatedOnEveryCallWithTheToken() throws Exception {
    tokenOnEveryCallTypedNotRetried(
        Status.Code.UNAUTHENTICATED, "UNAUTHENTICATED", UnauthenticatedException.class);
  }

  @Test
  void permissionDeniedOnEveryCallWithTheToken() throws Exception {
    tokenOnEveryCallTypedNotRetried(
        Status.Code.PERMISSION_DENIED, "PERMISSION_DENIED", PermissionDeniedException.class);
  }

  @Test
  void withoutATokenNoAuthorizationIsSent() throws Exception {
    String target = startFake(Status.Code.UNAUTHENTICATED, "UNAUTHENTICATED");
    try (StepwellClient c = StepwellClient.connect(target)) {
      assertThrows(UnauthenticatedException.class, () -> c.get("k"));
    }
    assertEquals(List.of(""), arrived);
  }

  @Test
  void codesWithoutErrorInfoAreTypedToo() {
    assertInstanceOf(
        UnauthenticatedException.class,
        StepwellException.from(Status.UNAUTHENTICATED.asRuntimeException()));
    assertInstanceOf(
        PermissionDeniedException.class,
        StepwellException.from(Status.PERMISSION_DENIED.asRuntimeException()));
  }

  @Test
  void aTokenNeedsTlsBeyondLoopback() {
    for (String local :
        List.of("127.0.0.1:1", "127.8.9.10:1", "localhost:1", "[::1]:1", "unix:/tmp/x.sock")) {
      StepwellClient.builder(local).token(TOKEN).build().close();
    }
    for (String remote :
        List.of("10.1.2.3:50051", "stepwell.internal:443", "dns:///stepwell.internal:443", "[2001:db8::1]:1")) {
      StepwellClient.Builder b = StepwellClient.builder(remote).token(TOKEN);
      IllegalStateException e = assertThrows(IllegalStateException.class, b::build, remote);
      assertFalse(e.getMessage().contains(TOKEN), e.getMessage());
      assertFalse(b.toString().contains(TOKEN), b.toString());
    }
    for (String bad : List.of("", "has space", "new\nline")) {
      IllegalArgumentException e =
          assertThrows(IllegalArgumentException.class, () -> StepwellClient.builder("127.0.0.1:1").token(bad));
      assertFalse(!bad.isEmpty() && e.getMessage().contains(bad), e.getMessage());
    }
  }

  /** Runs openssl in {@code dir}; the tests' certificates come from it, as in ./test. */
  private static void openssl(Path dir, String... args) throws Exception {
    List<String> cmd = new ArrayList<>(List.of("openssl"));
    cmd.addAll(List.of(args));
    Process p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes());
    assertEquals(0, p.waitFor(), "openssl " + String.join(" ", args) + ":\n" + out);
  }

  /** A throwaway CA in {@code dir} (ca.pem) with certificates name.pem/name.key it signed. */
  private static void pki(Path dir, String... names) throws Exception {
    openssl(dir, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-days", "1", "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign");
    int serial = 2;
    for (String name : names) {
      Files.writeString(
          dir.resolve(name + ".ext"),
          "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
              + "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n");
      openssl(dir, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
          "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + name);
      openssl(dir, "x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
          "-set_serial", String.valueOf(serial++), "-days", "1", "-extfile", name + ".ext",
          "-out", name + ".pem");
    }
  }

  @Test
  void mutualTlsCarriesTheTokenAndTheClientCertificate(@TempDir Path dir) throws Exception {
    pki(dir, "server", "client");
    Path other = Files.createDirectory(dir.resolve("other"));
    pki(other);
    ServerCredentials creds =
        TlsServerCredentials.newBuilder()
            .keyManager(dir.resolve("server.pem").toFile(), dir.resolve("server.key").toFile())
            .trustManager(dir.resolve("ca.pem").toFile())
            .clientAuth(TlsServerCredentials.ClientAuth.REQUIRE)
            .build();
    String target = startFake(Status.Code.PERMISSION_DENIED, "PERMISSION_DENIED", creds);
    try (StepwellClient c =
        StepwellClient.builder(target)
            .token(TOKEN)
            .tls(dir.resolve("ca.pem"), dir.resolve("client.pem"), dir.resolve("client.key"))
            .build()) {
      assertThrows(PermissionDeniedException.class, () -> c.get("k"));
    }
    assertEquals(List.of("Bearer " + TOKEN), arrived);
    assertEquals(List.of("CN=client"), peers);

    // Without a client certificate, or trusting another CA, the handshake fails: nothing arrives.
    for (StepwellClient.Builder b :
        List.of(
            StepwellClient.builder(target).tls(dir.resolve("ca.pem")),
            StepwellClient.builder(target)
                .tls(other.resolve("ca.pem"), dir.resolve("client.pem"), dir.resolve("client.key")))) {
      try (StepwellClient c = b.build()) {
        StepwellException e =
            assertThrows(
                StepwellException.class,
                () -> c.withRetry(RetryPolicy.NONE).withDeadline(Duration.ofSeconds(5)).get("k"));
        assertEquals(Status.Code.UNAVAILABLE, e.code(), e.toString());
      }
    }
    assertEquals(1, arrived.size());
    assertThrows(
        java.io.UncheckedIOException.class,
        () -> StepwellClient.builder(target).tls(dir.resolve("missing.pem")).build());
  }
}

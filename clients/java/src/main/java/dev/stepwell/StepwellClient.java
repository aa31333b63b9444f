package dev.stepwell;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.JavaType;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.google.protobuf.ByteString;
import com.google.protobuf.Timestamp;
import dev.stepwell.v1.AwaitRequest;
import dev.stepwell.v1.AwaitResponse;
import dev.stepwell.v1.BeginOutcome;
import dev.stepwell.v1.BeginRequest;
import dev.stepwell.v1.BeginResponse;
import dev.stepwell.v1.Checkpoint;
import dev.stepwell.v1.CheckpointRequest;
import dev.stepwell.v1.CheckpointResponse;
import dev.stepwell.v1.CheckpointServiceGrpc.CheckpointServiceBlockingStub;
import dev.stepwell.v1.CheckpointServiceGrpc;
import dev.stepwell.v1.CancelWaitRequest;
import dev.stepwell.v1.CancelWaitResponse;
import dev.stepwell.v1.CompleteRequest;
import dev.stepwell.v1.CompleteResponse;
import dev.stepwell.v1.CreateWaitRequest;
import dev.stepwell.v1.CreateWaitResponse;
import dev.stepwell.v1.DeleteTurnRequest;
import dev.stepwell.v1.DeleteTurnResponse;
import dev.stepwell.v1.ExtendRequest;
import dev.stepwell.v1.ExtendResponse;
import dev.stepwell.v1.GetRequest;
import dev.stepwell.v1.GetResponse;
import dev.stepwell.v1.GetWaitRequest;
import dev.stepwell.v1.GetWaitResponse;
import dev.stepwell.v1.IdempotencyServiceGrpc.IdempotencyServiceBlockingStub;
import dev.stepwell.v1.IdempotencyServiceGrpc;
import dev.stepwell.v1.ListTurnsRequest;
import dev.stepwell.v1.ListTurnsResponse;
import dev.stepwell.v1.ListWaitsRequest;
import dev.stepwell.v1.ListWaitsResponse;
import dev.stepwell.v1.ReleaseRequest;
import dev.stepwell.v1.ReleaseResponse;
import dev.stepwell.v1.RestoreRequest;
import dev.stepwell.v1.RestoreResponse;
import dev.stepwell.v1.SignalRequest;
import dev.stepwell.v1.SignalResponse;
import dev.stepwell.v1.TurnStatus;
import dev.stepwell.v1.TurnSummary;
import dev.stepwell.v1.Wait;
import dev.stepwell.v1.WaitServiceGrpc;
import dev.stepwell.v1.WaitServiceGrpc.WaitServiceBlockingStub;
import dev.stepwell.v1.WaitStatus;
import io.grpc.CallCredentials;
import io.grpc.ChannelCredentials;
import io.grpc.ClientInterceptor;
import io.grpc.Context;
import io.grpc.Deadline;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.TlsChannelCredentials;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.netty.shaded.io.netty.channel.EventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollDomainSocketChannel;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollEventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.unix.DomainSocketAddress;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * A blocking client of the stepwell sidecar: every RPC of {@code CheckpointService}, {@code
 * IdempotencyService} and {@code WaitService}, plus {@link #once}, and {@link #signal}, {@link
 * #waitForSignal} and {@link #sleepUntil} to pause a run for a person or a clock.
 *
 * <p>Every call has a deadline ({@link #withDeadline}) and is retried on UNAVAILABLE and
 * RESOURCE_EXHAUSTED / OVERLOADED by resending the same request ({@link #withRetry}, {@link
 * RetryPolicy#shouldRetry}). Failures are thrown as
 * {@link StepwellException} subclasses named after the sidecar's ErrorInfo reason. A request
 * whose {@code namespace} is empty gets the client's namespace ({@link #withNamespace}).
 *
 * <p>{@link #connect} is plaintext without credentials; {@link #builder} adds a bearer token
 * ({@link Builder#token}) and TLS with an optional client certificate ({@link Builder#tls}).
 *
 * <p>{@code with*} return views sharing this client's channel; close the original only.
 */
public final class StepwellClient implements AutoCloseable {
  /** The deadline of every call unless overridden. */
  public static final Duration DEFAULT_DEADLINE = Duration.ofSeconds(10);

  static final ObjectMapper JSON =
      new ObjectMapper().configure(SerializationFeature.ORDER_MAP_ENTRIES_BY_KEYS, true);

  private final Shared shared;
  private final String namespace;
  private final Duration deadline;
  private final RetryPolicy retry;
  private final boolean owner;

  /** The channel and threads shared by a client and its views. */
  private record Shared(
      ManagedChannel channel,
      EventLoopGroup eventLoop,
      ScheduledExecutorService heartbeats,
      CheckpointServiceBlockingStub checkpoints,
      IdempotencyServiceBlockingStub idempotency,
      WaitServiceBlockingStub waits,
      AtomicBoolean awaitTimeoutRefused) {}

  private StepwellClient(
      Shared shared, String namespace, Duration deadline, RetryPolicy retry, boolean owner) {
    this.shared = shared;
    this.namespace = namespace;
    this.deadline = deadline;
    this.retry = retry;
    this.owner = owner;
  }

  /** Connects to {@code host:port} or {@code unix:/path/to.sock} (plaintext, no token). */
  public static StepwellClient connect(String target) {
    return builder(target).build();
  }

  /**
   * A builder of a client of {@code host:port} or {@code unix:/path/to.sock}, for a token and TLS:
   * {@code StepwellClient.builder("stepwell.internal:50051").token(t).tls(ca, cert, key).build()}.
   */
  public static Builder builder(String target) {
    return new Builder(target);
  }

  /**
   * Options of a new client. Plaintext without a token unless told otherwise; a token is only sent
   * over TLS unless the target is a loopback address or a Unix socket.
   */
  public static final class Builder {
    private final String target;
    private BearerToken token;
    private Path caPem;
    private Path certPem;
    private Path keyPem;
    private final List<ClientInterceptor> interceptors = new ArrayList<>();

    private Builder(String target) {
      this.target = Objects.requireNonNull(target, "target");
    }

    /** Sends {@code authorization: Bearer <token>} on every call. */
    public Builder token(String token) {
      this.token = new BearerToken(token);
      return this;
    }

    /** TLS, trusting the CA certificates in {@code caPem} (PEM) for the sidecar's certificate. */
    public Builder tls(Path caPem) {
      return tls(caPem, null, null);
    }

    /**
     * TLS as {@link #tls(Path)}, presenting the client certificate chain {@code certPem} with its
     * PKCS#8 private key {@code keyPem} (both PEM) to a sidecar that asks for one; both or neither.
     */
    public Builder tls(Path caPem, Path certPem, Path keyPem) {
      if ((certPem == null) != (keyPem == null)) {
        throw new IllegalArgumentException("stepwell: a client certificate needs its key, and the other way round");
      }
      this.caPem = Objects.requireNonNull(caPem, "caPem");
      this.certPem = certPem;
      this.keyPem = keyPem;
      return this;
    }

    /** Adds interceptors to every call (e.g. for tracing). */
    public Builder intercept(ClientInterceptor... interceptors) {
      this.interceptors.addAll(List.of(interceptors));
      return this;
    }

    /**
     * Builds the client. Throws {@link IllegalStateException} for a token to a target beyond
     * loopback without TLS, and {@link UncheckedIOException} for unreadable TLS files.
     */
    public StepwellClient build() {
      boolean unix = target.startsWith("unix:");
      if (token != null && caPem == null && !isLocal(target)) {
        throw new IllegalStateException(
            "stepwell: a token to a target beyond loopback needs tls(...): it is never sent in the clear");
      }
      ChannelCredentials creds;
      if (caPem == null) {
        creds = InsecureChannelCredentials.create();
      } else {
        try {
          TlsChannelCredentials.Builder tls = TlsChannelCredentials.newBuilder().trustManager(caPem.toFile());
          if (certPem != null) tls.keyManager(certPem.toFile(), keyPem.toFile());
          creds = tls.build();
        } catch (IOException e) {
          throw new UncheckedIOException("stepwell: reading the TLS files", e);
        }
      }
      ManagedChannel channel;
      EventLoopGroup group = null;
      if (unix) {
        String path = target.substring("unix:".length());
        if (path.startsWith("//")) path = path.substring(2);
        group = new EpollEventLoopGroup(1);
        channel =
            NettyChannelBuilder.forAddress(new DomainSocketAddress(path), creds)
                .eventLoopGroup(group)
                .channelType(EpollDomainSocketChannel.class)
                .overrideAuthority("localhost")
                .intercept(interceptors)
                .build();
      } else {
        String t = target.startsWith("http://") ? target.substring("http://".length()) : target;
        channel = NettyChannelBuilder.forTarget(t, creds).intercept(interceptors).build();
      }
      return fromChannel(channel, group, token);
    }

    @Override
    public String toString() {
      return "StepwellClient.Builder[target="
          + target
          + (token == null ? "" : ", token=redacted")
          + (caPem == null ? ", plaintext" : ", tls ca=" + caPem)
          + (certPem == null ? "" : ", client certificate=" + certPem)
          + "]";
    }
  }

  /**
   * Whether {@code target} never leaves the machine: a Unix socket, {@code localhost} or a loopback
   * IP literal. A DNS name other than localhost counts as remote (it is not resolved here).
   */
  static boolean isLocal(String target) {
    if (target.startsWith("unix:") || target.startsWith("unix-abstract:")) return true;
    String t = target;
    int scheme = t.indexOf("://");
    if (scheme >= 0) {
      // scheme://authority/endpoint: the endpoint is the address.
      String rest = t.substring(scheme + 3);
      int slash = rest.indexOf('/');
      t = slash >= 0 ? rest.substring(slash + 1) : rest;
    }
    String host;
    if (t.startsWith("[")) {
      int end = t.indexOf(']');
      host = end > 0 ? t.substring(1, end) : t;
    } else if (t.indexOf(':') == t.lastIndexOf(':')) {
      int colon = t.indexOf(':');
      host = colon >= 0 ? t.substring(0, colon) : t;
    } else {
      host = t; // a bare IPv6 literal
    }
    if (host.equalsIgnoreCase("localhost")) return true;
    boolean ipLiteral = host.matches("[0-9.]+") || host.contains(":");
    if (!ipLiteral) return false;
    try {
      return InetAddress.getByName(host).isLoopbackAddress();
    } catch (UnknownHostException e) {
      return false;
    }
  }

  /** Wraps a channel built by the caller; {@link #close()} shuts it down. */
  public static StepwellClient fromChannel(ManagedChannel channel) {
    return fromChannel(channel, null, null);
  }

  private static StepwellClient fromChannel(
      ManagedChannel channel, EventLoopGroup group, CallCredentials token) {
    ScheduledExecutorService heartbeats =
        Executors.newScheduledThreadPool(
            1,
            r -> {
              Thread t = new Thread(r, "stepwell-heartbeat");
              t.setDaemon(true);
              return t;
            });
    CheckpointServiceBlockingStub checkpoints = CheckpointServiceGrpc.newBlockingStub(channel);
    IdempotencyServiceBlockingStub idempotency = IdempotencyServiceGrpc.newBlockingStub(channel);
    WaitServiceBlockingStub waits = WaitServiceGrpc.newBlockingStub(channel);
    if (token != null) {
      // Every call, once() and the waits included, goes through these three stubs.
      checkpoints = checkpoints.withCallCredentials(token);
      idempotency = idempotency.withCallCredentials(token);
      waits = waits.withCallCredentials(token);
    }
    // Set once the sidecar refuses an Await's timeout as beyond its longest: see awaitPoll.
    AtomicBoolean awaitTimeoutRefused = new AtomicBoolean();
    Shared s =
        new Shared(
            channel, group, heartbeats, checkpoints, idempotency, waits, awaitTimeoutRefused);
    return new StepwellClient(s, "", DEFAULT_DEADLINE, RetryPolicy.DEFAULT, true);
  }

  /** Names the channel's authority and the namespace; never credentials. */
  @Override
  public String toString() {
    return "StepwellClient[" + shared.channel.authority() + ", namespace=" + namespace + "]";
  }

  /** A view whose requests with an empty namespace use {@code ns}. */
  public StepwellClient withNamespace(String ns) {
    return new StepwellClient(shared, ns, deadline, retry, false);
  }

  /**
   * A view whose calls have this deadline: each call's whole, its retries and their backoff
   * included. (An Await's is this plus its timeout; {@link #waitForSignal}, {@link #sleepUntil}
   * and {@link #once} are many calls, each bounded so.)
   */
  public StepwellClient withDeadline(Duration d) {
    return new StepwellClient(shared, namespace, d, retry, false);
  }

  /** A view with another retry policy; {@link RetryPolicy#NONE} for one attempt. */
  public StepwellClient withRetry(RetryPolicy r) {
    return new StepwellClient(shared, namespace, deadline, r, false);
  }

  public String namespace() {
    return namespace;
  }

  public Duration deadline() {
    return deadline;
  }

  public RetryPolicy retryPolicy() {
    return retry;
  }

  @Override
  public void close() {
    if (!owner) return;
    shared.heartbeats.shutdownNow();
    shared.channel.shutdown();
    try {
      if (!shared.channel.awaitTermination(5, TimeUnit.SECONDS)) shared.channel.shutdownNow();
    } catch (InterruptedException e) {
      shared.channel.shutdownNow();
      Thread.currentThread().interrupt();
    }
    if (shared.eventLoop != null) shared.eventLoop.shutdownGracefully(0, 1, TimeUnit.SECONDS);
  }

  // ---------------------------------------------------------------- call machinery

  private <R> R call(Function<Deadline, R> attempt) {
    return call(deadline, attempt);
  }

  /**
   * As {@link #call(Function)}, the whole call, retries and their backoff included, within {@code
   * total}: every attempt gets the same absolute deadline, and a retry whose backoff would end past
   * it is not begun (the last failure is thrown).
   */
  private <R> R call(Duration total, Function<Deadline, R> attempt) {
    Deadline end = Deadline.after(total.toNanos(), TimeUnit.NANOSECONDS);
    int n = 0;
    while (true) {
      n++;
      try {
        return attempt.apply(end);
      } catch (StatusRuntimeException e) {
        StepwellException se = Errors.decode(e);
        if (!retry.shouldRetry(se, n)) throw se;
        long pause = retry.backoff(n).toNanos();
        if (pause >= end.timeRemaining(TimeUnit.NANOSECONDS)) throw se;
        try {
          TimeUnit.NANOSECONDS.sleep(pause);
        } catch (InterruptedException ie) {
          Thread.currentThread().interrupt();
          throw se;
        }
      }
    }
  }

  private CheckpointServiceBlockingStub cp(Deadline d) {
    return shared.checkpoints.withDeadline(d);
  }

  private IdempotencyServiceBlockingStub ip(Deadline d) {
    return shared.idempotency.withDeadline(d);
  }

  private WaitServiceBlockingStub wp(Deadline d) {
    return shared.waits.withDeadline(d);
  }

  private String ns(String requested) {
    return requested.isEmpty() ? namespace : requested;
  }

  /**
   * The namespace of a wait request: as {@link #ns(String)}, except that a request naming its wait
   * by handle keeps an empty namespace, since the handle carries the wait's own and whoever holds
   * it (an approval page, a webhook) need not know it.
   */
  private String ns(String requested, String handle) {
    return handle.isEmpty() ? ns(requested) : requested;
  }

  // ---------------------------------------------------------------- CheckpointService

  /** Checkpoint RPC, the request as given (its empty namespace filled in). */
  public CheckpointResponse checkpoint(CheckpointRequest request) {
    CheckpointRequest r = request.toBuilder().setNamespace(ns(request.getNamespace())).build();
    return call(d -> cp(d).checkpoint(r));
  }

  /** Appends a checkpoint taken now; {@code state} is JSON-serialized (a byte[] is sent as is). */
  public CheckpointResponse checkpoint(String turnId, String phase, Object state) {
    return checkpoint(turnId, phase, state, Instant.now(), false);
  }

  /** Appends a checkpoint; {@code state} is JSON-serialized (a byte[] is sent as is: UTF-8 JSON). */
  public CheckpointResponse checkpoint(
      String turnId, String phase, Object state, Instant timestamp, boolean terminal) {
    return checkpoint(
        CheckpointRequest.newBuilder()
            .setTurnId(turnId)
            .setPhase(phase)
            .setState(ByteString.copyFrom(stateBytes(state)))
            .setTimestamp(timestamp(timestamp))
            .setTerminal(terminal)
            .build());
  }

  /** Restore RPC: one page. */
  public RestoreResponse restore(RestoreRequest request) {
    RestoreRequest r = request.toBuilder().setNamespace(ns(request.getNamespace())).build();
    return call(d -> cp(d).restore(r));
  }

  /** Every checkpoint of a turn, oldest first (all pages). */
  public List<Checkpoint> restore(String turnId) {
    List<Checkpoint> out = new ArrayList<>();
    RestoreRequest.Builder b = RestoreRequest.newBuilder().setTurnId(turnId);
    while (true) {
      RestoreResponse page = restore(b.build());
      out.addAll(page.getCheckpointsList());
      if (page.getNextPageToken().isEmpty()) return out;
      b.setPageToken(page.getNextPageToken());
    }
  }

  /** The latest checkpoint of a turn ("load the latest snapshot"), if any. */
  public Optional<Checkpoint> latest(String turnId) {
    RestoreResponse r =
        restore(
            RestoreRequest.newBuilder().setTurnId(turnId).setNewestFirst(true).setPageSize(1).build());
    return r.getCheckpointsCount() == 0 ? Optional.empty() : Optional.of(r.getCheckpoints(0));
  }

  /**
   * The state of the latest checkpoint of a turn, if any, decoded from JSON into {@code type}: the
   * read side of {@link #checkpoint(String, String, Object)}. {@link IllegalStateException} when it
   * is no JSON of that type.
   */
  public <T> Optional<T> latest(String turnId, Class<T> type) {
    return latest(turnId).map(cp -> state(cp, type));
  }

  /** As {@link #latest(String, Class)}, for a generic type ({@code new TypeReference<...>() {}}). */
  public <T> Optional<T> latest(String turnId, TypeReference<T> type) {
    return latest(turnId).map(cp -> state(cp, type));
  }

  /** The states of every checkpoint of a turn, oldest first, each decoded as {@link #state}. */
  public <T> List<T> restore(String turnId, Class<T> type) {
    return restore(turnId).stream().map(cp -> state(cp, type)).toList();
  }

  /** As {@link #restore(String, Class)}, for a generic type. */
  public <T> List<T> restore(String turnId, TypeReference<T> type) {
    return restore(turnId).stream().map(cp -> state(cp, type)).toList();
  }

  /**
   * The state of {@code checkpoint} decoded from JSON into {@code type} (Jackson, as {@code
   * checkpoint} encoded it); {@link IllegalStateException} when it is no JSON of that type.
   */
  public static <T> T state(Checkpoint checkpoint, Class<T> type) {
    return decodeState(checkpoint, JSON.constructType(type));
  }

  /** As {@link #state(Checkpoint, Class)}, for a generic type. */
  public static <T> T state(Checkpoint checkpoint, TypeReference<T> type) {
    return decodeState(checkpoint, JSON.constructType(type));
  }

  private static <T> T decodeState(Checkpoint checkpoint, JavaType type) {
    try {
      return JSON.readValue(checkpoint.getState().toByteArray(), type);
    } catch (IOException e) {
      throw new IllegalStateException(
          "stepwell: the state of checkpoint " + checkpoint.getTurnId() + "/"
              + checkpoint.getPhase() + " is no JSON of " + type + ": " + e.getMessage(), e);
    }
  }

  /** ListTurns RPC: one page. */
  public ListTurnsResponse listTurns(ListTurnsRequest request) {
    ListTurnsRequest r = request.toBuilder().setNamespace(ns(request.getNamespace())).build();
    return call(d -> cp(d).listTurns(r));
  }

  /** Every turn summary with this status (all pages). */
  public List<TurnSummary> listTurns(TurnStatus status) {
    List<TurnSummary> out = new ArrayList<>();
    ListTurnsRequest.Builder b = ListTurnsRequest.newBuilder().setStatus(status);
    while (true) {
      ListTurnsResponse page = listTurns(b.build());
      out.addAll(page.getTurnsList());
      if (page.getNextPageToken().isEmpty()) return out;
      b.setPageToken(page.getNextPageToken());
    }
  }

  /** DeleteTurn RPC. */
  public DeleteTurnResponse deleteTurn(DeleteTurnRequest request) {
    DeleteTurnRequest r = request.toBuilder().setNamespace(ns(request.getNamespace())).build();
    return call(d -> cp(d).deleteTurn(r));
  }

  /** Deletes every checkpoint of a turn; returns how many. */
  public long deleteTurn(String turnId) {
    return deleteTurn(DeleteTurnRequest.newBuilder().setTurnId(turnId).build()).getDeleted();
  }

  // ---------------------------------------------------------------- IdempotencyService

  /** Begin RPC. */
  public BeginResponse begin(BeginRequest request) {
    BeginRequest r = request.toBuilder().setNamespace(ns(request.getNamespace())).build();
    return call(d -> ip(d).begin(r));
  }

  /** Begins {@code key} with the sidecar's default lease. */
  public BeginResponse begin(String key) {
    return begin(BeginRequest.newBuilder().setKey(key).build());
  }

  /** Begins {@code key} with this lease. */
  public BeginResponse begin(String key, Duration lease) {
    return begin(BeginRequest.newBuilder().setKey(key).setLease(duration(lease)).build());
  }

  /** Complete RPC. */
  public CompleteResponse complete(CompleteRequest request) {
    CompleteRequest r = request.toBuilder().setNamespace(ns(request.getNamespace())).build();
    return call(d -> ip(d).complete(r));
  }

  public CompleteResponse complete(String key, long leaseToken, byte[] result) {
    return complete(
        CompleteRequest.newBuilder()
            .setKey(key)
            .setLeaseToken(leaseToken)
            .setResult(ByteString.copyFrom(result))
            .build());
  }

  /** Release RPC. */
  public ReleaseResponse release(ReleaseRequest request) {
    ReleaseRequest r = request.toBuilder().setNamespace(ns(request.getNamespace())).build();
    return call(d -> ip(d).release(r));
  }

  public ReleaseResponse release(String key, long leaseToken, String error, boolean permanent) {
    return release(
        ReleaseRequest.newBuilder()
            .setKey(key)
            .setLeaseToken(leaseToken)
            .setError(error == null ? "" : error)
            .setPermanent(permanent)
            .build());
  }

  /** Extend RPC. */
  public ExtendResponse extend(ExtendRequest request) {
    ExtendRequest r = request.toBuilder().setNamespace(ns(request.getNamespace())).build();
    return call(d -> ip(d).extend(r));
  }

  public ExtendResponse extend(String key, long leaseToken, Duration lease) {
    ExtendRequest.Builder b = ExtendRequest.newBuilder().setKey(key).setLeaseToken(leaseToken);
    if (lease != null) b.setLease(duration(lease));
    return extend(b.build());
  }

  /** Get RPC. */
  public GetResponse get(GetRequest request) {
    GetRequest r = request.toBuilder().setNamespace(ns(request.getNamespace())).build();
    return call(d -> ip(d).get(r));
  }

  /** The record of {@code key}; {@link KeyNotFoundException} when there is none. */
  public GetResponse get(String key) {
    return get(GetRequest.newBuilder().setKey(key).build());
  }

  // ---------------------------------------------------------------- WaitService

  /**
   * The longest one Await of {@link #waitForSignal} and {@link #sleepUntil} asks for, and the
   * sidecar's default when an {@link AwaitRequest} sets no timeout: a wait that lasts days is
   * many bounded calls, each one a fresh chance to reach a restarted sidecar.
   */
  public static final Duration AWAIT_POLL_MAX = Duration.ofSeconds(60);

  /** CreateWait RPC: creates the wait, or returns the one that exists (the first one stands). */
  public CreateWaitResponse createWait(CreateWaitRequest request) {
    CreateWaitRequest r = request.toBuilder().setNamespace(ns(request.getNamespace())).build();
    return call(d -> wp(d).createWait(r));
  }

  /** Creates the wait {@code name} of {@code turnId}, or returns the one that exists. */
  public Wait createWait(String turnId, String name) {
    return createWait(CreateWaitRequest.newBuilder().setTurnId(turnId).setName(name).build())
        .getWait();
  }

  /**
   * Signal RPC. Another settlement won: {@link WaitSettledException} with the winner, whose
   * payload, when the sidecar left it out of the error, is read with GetWait. A request naming its
   * wait by {@code handle} keeps an empty namespace (the handle carries the wait's).
   */
  public SignalResponse signal(SignalRequest request) {
    SignalRequest r =
        request.toBuilder().setNamespace(ns(request.getNamespace(), request.getHandle())).build();
    try {
      return call(d -> wp(d).signal(r));
    } catch (WaitSettledException e) {
      throw withPayload(e, r.getNamespace(), r.getTurnId(), r.getName(), r.getHandle());
    }
  }

  /**
   * Resolves the wait {@code name} of {@code turnId} with {@code payload}, creating it resolved if
   * no run has created it yet. True when this call settled it; false when it repeated the winning
   * signal (also when a retry of this call's first attempt, whose answer was lost, finds that
   * attempt's settlement); {@link WaitSettledException}, carrying the winner, when another payload
   * won.
   */
  public boolean signal(String turnId, String name, byte[] payload) {
    return signal(
            SignalRequest.newBuilder()
                .setTurnId(turnId)
                .setName(name)
                .setPayload(ByteString.copyFrom(payload))
                .build())
        .getSettled();
  }

  /** {@link #signal(String, String, byte[])} with an empty payload. */
  public boolean signal(String turnId, String name) {
    return signal(turnId, name, new byte[0]);
  }

  /** As {@link #signal(String, String, byte[])}, the wait named by its handle alone. */
  public boolean signalHandle(String handle, byte[] payload) {
    return signal(
            SignalRequest.newBuilder()
                .setHandle(handle)
                .setPayload(ByteString.copyFrom(payload))
                .build())
        .getSettled();
  }

  /**
   * Await RPC: the wait once settled, or still pending after the request's timeout. The call's
   * deadline (its retries included) is the client's plus that timeout ({@link #AWAIT_POLL_MAX}
   * when unset), so that the sidecar's answer with a pending wait comes before it.
   */
  public AwaitResponse await(AwaitRequest request) {
    AwaitRequest r =
        request.toBuilder().setNamespace(ns(request.getNamespace(), request.getHandle())).build();
    Duration wait = r.hasTimeout() ? javaDuration(r.getTimeout()) : AWAIT_POLL_MAX;
    return call(deadline.plus(wait), d -> wp(d).await(r));
  }

  /** GetWait RPC; {@link WaitNotFoundException} for an unknown wait. */
  public GetWaitResponse getWait(GetWaitRequest request) {
    GetWaitRequest r =
        request.toBuilder().setNamespace(ns(request.getNamespace(), request.getHandle())).build();
    return call(d -> wp(d).getWait(r));
  }

  /** The wait {@code name} of {@code turnId}; {@link WaitNotFoundException} when there is none. */
  public Wait getWait(String turnId, String name) {
    return getWait(GetWaitRequest.newBuilder().setTurnId(turnId).setName(name).build()).getWait();
  }

  /** ListWaits RPC: one page. */
  public ListWaitsResponse listWaits(ListWaitsRequest request) {
    ListWaitsRequest r = request.toBuilder().setNamespace(ns(request.getNamespace())).build();
    return call(d -> wp(d).listWaits(r));
  }

  /** Every wait of {@code turnId} (every turn's when empty) in this status (any: UNSPECIFIED). */
  public List<Wait> listWaits(String turnId, WaitStatus status) {
    List<Wait> out = new ArrayList<>();
    ListWaitsRequest.Builder b = ListWaitsRequest.newBuilder().setTurnId(turnId).setStatus(status);
    while (true) {
      ListWaitsResponse page = listWaits(b.build());
      out.addAll(page.getWaitsList());
      if (page.getNextPageToken().isEmpty()) return out;
      b.setPageToken(page.getNextPageToken());
    }
  }

  /**
   * CancelWait RPC. A wait settled otherwise: {@link WaitSettledException} with the winner, read
   * in full as {@link #signal(SignalRequest)} does.
   */
  public CancelWaitResponse cancelWait(CancelWaitRequest request) {
    CancelWaitRequest r =
        request.toBuilder().setNamespace(ns(request.getNamespace(), request.getHandle())).build();
    try {
      return call(d -> wp(d).cancelWait(r));
    } catch (WaitSettledException e) {
      throw withPayload(e, r.getNamespace(), r.getTurnId(), r.getName(), r.getHandle());
    }
  }

  /** Cancels the wait {@code name} of {@code turnId}; true when this call cancelled it. */
  public boolean cancelWait(String turnId, String name) {
    return cancelWait(CancelWaitRequest.newBuilder().setTurnId(turnId).setName(name).build())
        .getCancelled();
  }

  /**
   * The settled-wait error with the winner's payload, which the sidecar leaves out of an error
   * whose trailers it would make too large: read with GetWait, the wait named as the failed
   * request named it. If that read fails, the error stays as it came (payload omitted), since
   * the settlement is what the caller must learn.
   */
  private WaitSettledException withPayload(
      WaitSettledException e, String namespace, String turnId, String name, String handle) {
    if (!e.payloadOmitted()) return e;
    GetWaitRequest where =
        GetWaitRequest.newBuilder()
            .setNamespace(namespace)
            .setTurnId(turnId)
            .setName(name)
            .setHandle(handle)
            .build();
    try {
      return e.withWait(getWait(where).getWait());
    } catch (StepwellException ignored) {
      return e;
    }
  }

  /** {@link #waitForSignal(String, String, Duration)} without a timeout: waits until settled. */
  public byte[] waitForSignal(String turnId, String name) {
    return waitForSignal(turnId, name, null);
  }

  /**
   * Waits for the wait {@code name} of {@code turnId} to be signalled and returns its payload.
   * Creates the wait if needed (CreateWait is idempotent, so a run resumed on another worker finds
   * the wait, and any signal that came meanwhile), then Awaits it in bounded long polls (each at
   * most {@link #AWAIT_POLL_MAX} and the time left). Each call is retried on UNAVAILABLE as every
   * call is ({@link #withRetry}), and beyond those retries, or when the sidecar does not answer
   * within the deadline (DEADLINE_EXCEEDED: it is stalled), asked again while the timeout allows,
   * since the sidecar may restart or stall under a waiting run, before the wait was created as
   * after. {@code timeout} (null: none) bounds the whole call, every RPC's deadline included.
   * Throws {@link WaitExpiredException} or {@link WaitCancelledException} when the wait was
   * settled so, and {@link WaitTimeoutException}, the wait still pending, when {@code timeout}
   * passes first, however far the calls got. A timeout of zero looks once: CreateWait within the
   * client's deadline, then the payload if the wait is settled, else WaitTimeoutException.
   */
  public byte[] waitForSignal(String turnId, String name, Duration timeout) {
    Until until = new Until(System.nanoTime(), timeout);
    CreateWaitRequest r = CreateWaitRequest.newBuilder().setTurnId(turnId).setName(name).build();
    return settledPayload(awaitSettled(createWithin(r, until), until));
  }

  /**
   * A durable sleep until {@code when}: creates the wait {@code name} of {@code turnId} with its
   * timer at {@code when} (the first creation stands, so a run resumed later keeps its original
   * time, whatever {@code when} it computes now), then waits until the wait is settled. Returns
   * once it is RESOLVED, by its timer or by a Signal that wakes the run early: at once for a run
   * that resumes after the timer fired, after the rest of the time for one that resumes before.
   * An unreachable or stalled sidecar is waited out as by {@link #waitForSignal}. Throws {@link
   * WaitCancelledException} or {@link WaitExpiredException} when it was settled so.
   */
  public void sleepUntil(String turnId, String name, Instant when) {
    CreateWaitRequest r =
        CreateWaitRequest.newBuilder()
            .setTurnId(turnId)
            .setName(name)
            .setResolveAt(timestamp(when))
            .build();
    Until until = new Until(System.nanoTime(), null);
    settledPayload(awaitSettled(createWithin(r, until), until));
  }

  /** The end of a wait's timeout, measured from {@code start} (nanoTime); none when null. */
  private record Until(long start, Duration timeout) {
    /** Whether the timeout has passed. */
    boolean over() {
      return timeout != null && Duration.ofNanos(System.nanoTime() - start).compareTo(timeout) >= 0;
    }

    /**
     * {@code d}, or the time left when that is shorter (at least 1 ns). A timeout of zero (or
     * less) is one look, which a call makes within {@code d}.
     */
    Duration cap(Duration d) {
      if (timeout == null || timeout.isNegative() || timeout.isZero()) return d;
      Duration left = timeout.minusNanos(System.nanoTime() - start);
      if (left.compareTo(Duration.ofNanos(1)) < 0) left = Duration.ofNanos(1);
      return left.compareTo(d) < 0 ? left : d;
    }
  }

  /**
   * CreateWait, asked again while {@code until} allows when the sidecar is unreachable or stalled
   * (see {@link #rideOut}).
   */
  private Wait createWithin(CreateWaitRequest request, Until until) {
    CreateWaitRequest r = request.toBuilder().setNamespace(ns(request.getNamespace())).build();
    Wait named =
        Wait.newBuilder()
            .setNamespace(r.getNamespace())
            .setTurnId(r.getTurnId())
            .setName(r.getName())
            .build();
    StepwellException last = null;
    while (true) {
      if (last != null && until.over()) throw timedOut(named, until, last);
      try {
        return call(until.cap(deadline), d -> wp(d).createWait(r)).getWait();
      } catch (StepwellException e) {
        rideOut(e, named, until);
        last = e;
      }
    }
  }

  /**
   * Awaits {@code w} until it is settled, in polls of at most {@link #AWAIT_POLL_MAX} and the time
   * {@code until} leaves; {@link WaitTimeoutException} once it has passed.
   */
  private Wait awaitSettled(Wait w, Until until) {
    StepwellException last = null;
    while (w.getStatus() == WaitStatus.WAIT_STATUS_PENDING) {
      if (until.over()) throw timedOut(w, until, last);
      try {
        w = awaitPoll(w, until.cap(AWAIT_POLL_MAX), until);
        last = null;
      } catch (StepwellException e) {
        rideOut(e, w, until);
        last = e;
      }
    }
    return w;
  }

  /**
   * What a wait does after its call failed with {@code e}: throws
   * {@link WaitTimeoutException} once {@code until} has passed (whatever the failure: the timeout
   * bounded the call). A sidecar unreachable beyond the call's own retries (a restart, a deploy)
   * is waited out, the policy's longest backoff (at most the time left) at a time, and one that
   * did not answer within the deadline (stalled) is asked again at once: a run that waits for
   * hours must not fail for either, and its timeout still bounds it. Anything else, and any
   * failure under a policy that does not retry UNAVAILABLE ({@link RetryPolicy#NONE}), is thrown.
   */
  private void rideOut(StepwellException e, Wait w, Until until) {
    if (until.over()) throw timedOut(w, until, e);
    if (!isOutage(e) || !waitsOutOutages()) throw e;
    if (e.code() == io.grpc.Status.Code.DEADLINE_EXCEEDED) return;
    Duration pause = until.cap(retry.backoff(64));
    try {
      TimeUnit.NANOSECONDS.sleep(pause.toNanos());
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
      throw e;
    }
    shared.channel.resetConnectBackoff(); // the next call dials at once, not at gRPC's backoff
  }

  /** The sidecar was unreachable, or did not answer in time: resending the same call is safe. */
  private static boolean isOutage(StepwellException e) {
    return e instanceof UnavailableException || e.code() == io.grpc.Status.Code.DEADLINE_EXCEEDED;
  }

  /** Whether this client's policy retries outages at all (not {@link RetryPolicy#NONE}). */
  private boolean waitsOutOutages() {
    return retry.maxAttempts() > 1 && retry.retryable().contains(io.grpc.Status.Code.UNAVAILABLE);
  }

  private static WaitTimeoutException timedOut(Wait w, Until until, Throwable cause) {
    return new WaitTimeoutException(
        io.grpc.Status.Code.DEADLINE_EXCEEDED,
        WaitException.describe(w) + " still pending after " + until.timeout(),
        "WAIT_PENDING", "", waitMetadata(w), null, cause, w);
  }

  /**
   * One Await of {@code w} asking for {@code poll}, within the client's deadline plus {@code poll}
   * and the time {@code until} leaves. A sidecar whose longest Await ({@code
   * --await-timeout-max-ms}) is shorter refuses that (INVALID_ARGUMENT on {@code timeout}); from
   * then on this client's Awaits ask for no timeout, so that the sidecar waits its own longest,
   * and a poll that the caller's time left makes shorter than {@link #AWAIT_POLL_MAX} ends by
   * the call's deadline instead, {@code w} returned unchanged.
   */
  private Wait awaitPoll(Wait w, Duration poll, Until until) {
    AwaitRequest.Builder b =
        AwaitRequest.newBuilder()
            .setNamespace(namespace)
            .setTurnId(w.getTurnId())
            .setName(w.getName());
    if (!shared.awaitTimeoutRefused.get()) {
      AwaitRequest r = b.setTimeout(duration(poll)).build();
      try {
        return call(until.cap(deadline.plus(poll)), d -> wp(d).await(r)).getWait();
      } catch (InvalidArgumentException e) {
        if (!e.field().equals("timeout")) throw e;
        shared.awaitTimeoutRefused.set(true);
      }
    }
    AwaitRequest r = b.clearTimeout().build();
    boolean cut = poll.compareTo(AWAIT_POLL_MAX) < 0;
    try {
      return call(cut ? poll : until.cap(deadline.plus(poll)), d -> wp(d).await(r)).getWait();
    } catch (StepwellException e) {
      if (cut && e.code() == io.grpc.Status.Code.DEADLINE_EXCEEDED && !until.over()) return w;
      throw e;
    }
  }

  /** The payload of a RESOLVED wait; the typed error of one settled otherwise. */
  private static byte[] settledPayload(Wait w) {
    switch (w.getStatus()) {
      case WAIT_STATUS_RESOLVED:
        return w.getPayload().toByteArray();
      case WAIT_STATUS_EXPIRED:
        throw new WaitExpiredException(
            io.grpc.Status.Code.FAILED_PRECONDITION,
            WaitException.describe(w) + " expired",
            "WAIT_EXPIRED", "", waitMetadata(w), null, null, w);
      case WAIT_STATUS_CANCELLED:
        throw new WaitCancelledException(
            io.grpc.Status.Code.FAILED_PRECONDITION,
            WaitException.describe(w) + " was cancelled",
            "WAIT_CANCELLED", "", waitMetadata(w), null, null, w);
      default:
        throw new IllegalStateException(
            "stepwell: " + WaitException.describe(w) + " answered in status " + w.getStatus());
    }
  }

  private static Map<String, String> waitMetadata(Wait w) {
    return Map.of("namespace", w.getNamespace(), "turn_id", w.getTurnId(), "name", w.getName());
  }

  // ---------------------------------------------------------------- once

  /**
   * Runs {@code fn} at most once per {@code key} and returns its result, JSON round-tripped (a
   * JSON object comes back as a {@code Map}, a number as Integer/Long/Double...). Use {@link
   * #once(String, Class, OnceOptions, Function)} for a typed result.
   */
  public <T> T once(String key, Supplier<T> fn) {
    return once(key, ctx -> fn.get());
  }

  /** As {@link #once(String, Supplier)}, handing {@code fn} the {@link OnceContext}. */
  @SuppressWarnings("unchecked")
  public <T> T once(String key, Function<OnceContext, T> fn) {
    return (T) onceTyped(key, JSON.constructType(Object.class), OnceOptions.defaults(), fn);
  }

  public <T> T once(String key, Class<T> type, Supplier<T> fn) {
    return once(key, type, OnceOptions.defaults(), ctx -> fn.get());
  }

  public <T> T once(String key, Class<T> type, OnceOptions options, Function<OnceContext, T> fn) {
    return onceTyped(key, JSON.constructType(type), options, fn);
  }

  public <T> T once(
      String key, TypeReference<T> type, OnceOptions options, Function<OnceContext, T> fn) {
    return onceTyped(key, JSON.constructType(type), options, fn);
  }

  /**
   * The core of {@code once}, as in every stepwell client:
   *
   * <ul>
   *   <li>ACQUIRED: runs {@code fn} while a scheduled task Extends the lease every heartbeat, then
   *       Completes with the JSON of its result. If {@code fn} throws, the lease is Released (not
   *       permanent) and the exception rethrown.
   *   <li>COMPLETED: returns the recorded result without calling {@code fn}.
   *   <li>IN_PROGRESS: waits (bounded by the wait timeout) and asks again; {@link
   *       OnceTimeoutException} when the wait runs out.
   *   <li>FAILED: {@link OperationFailedException} with the recorded error.
   * </ul>
   */
  private <T> T onceTyped(
      String key, JavaType type, OnceOptions options, Function<OnceContext, T> fn) {
    long deadlineNanos = System.nanoTime() + options.waitTimeout().toNanos();
    long sleepMs = Math.max(1, options.pollInterval().toMillis());
    BeginRequest.Builder b =
        BeginRequest.newBuilder()
            .setKey(key)
            .setFingerprint(ByteString.copyFrom(options.fingerprint()))
            .setLease(duration(options.lease()));
    if (options.retention() != null) b.setRetention(duration(options.retention()));
    BeginRequest request = b.build();
    while (true) {
      long sent = System.nanoTime();
      BeginResponse r = begin(request);
      BeginOutcome outcome = r.getOutcome();
      if (outcome == BeginOutcome.BEGIN_OUTCOME_COMPLETED) {
        return decode(r.getResult().toByteArray(), type);
      }
      if (outcome == BeginOutcome.BEGIN_OUTCOME_FAILED) {
        throw new OperationFailedException(
            io.grpc.Status.Code.FAILED_PRECONDITION,
            r.getError(),
            "FAILED",
            "",
            java.util.Map.of("key", key),
            null,
            null);
      }
      if (outcome == BeginOutcome.BEGIN_OUTCOME_ACQUIRED) {
        return runAcquired(key, r, sent, type, options, fn);
      }
      long remainingMs = (deadlineNanos - System.nanoTime()) / 1_000_000;
      if (remainingMs <= 0) {
        throw new OnceTimeoutException(
            io.grpc.Status.Code.DEADLINE_EXCEEDED,
            "key " + key + " still in progress after " + options.waitTimeout(),
            "IN_PROGRESS",
            "",
            java.util.Map.of("key", key),
            null,
            null);
      }
      long untilExpiry = Math.max(5, millisUntil(r.getLeaseExpiresAt()));
      try {
        Thread.sleep(Math.min(Math.min(sleepMs, remainingMs), untilExpiry));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IllegalStateException("interrupted while waiting for " + key, e);
      }
      sleepMs = Math.min(sleepMs * 2, 1000);
    }
  }

  /**
   * Runs {@code fn} as the holder of the lease {@code r} acquired ({@code sent}: when its Begin
   * was sent, by nanoTime), heartbeating it, then records the result ({@link #completeHeld}).
   */
  private <T> T runAcquired(
      String key,
      BeginResponse r,
      long sent,
      JavaType type,
      OnceOptions options,
      Function<OnceContext, T> fn) {
    OnceContext ctx =
        new OnceContext(key, r.getLeaseToken(), r.getAttempt(), r.getPreviousLeaseExpired());
    ctx.leaseRenewed(sent + options.lease().toNanos());
    long every = options.heartbeatOrDefault().toNanos();
    Runnable beat =
        () -> {
          if (ctx.leaseLost()) return;
          try {
            long at = System.nanoTime();
            extend(key, ctx.leaseToken(), options.lease());
            ctx.leaseRenewed(at + options.lease().toNanos());
          } catch (LeaseLostException | NotAcquiredException e) {
            ctx.markLeaseLost();
          } catch (RuntimeException e) {
            // transient: try again at the next beat
          }
        };
    ScheduledFuture<?> heartbeat =
        shared.heartbeats.scheduleWithFixedDelay(beat, every, every, TimeUnit.NANOSECONDS);
    T value;
    try {
      value = fn.apply(ctx);
    } catch (RuntimeException | Error e) {
      heartbeat.cancel(false);
      try {
        String msg = e.getClass().getSimpleName() + ": " + e.getMessage();
        release(key, ctx.leaseToken(), msg.length() > 16000 ? msg.substring(0, 16000) : msg, false);
      } catch (StepwellException ignored) {
        // the lease was lost or the sidecar is gone: the original error matters more
      }
      throw e;
    }
    heartbeat.cancel(false);
    byte[] raw = encode(value);
    completeHeld(key, ctx, raw);
    return decode(raw, type);
  }

  /**
   * Records {@code raw} as the result of {@code key} with the holder's fencing token. The holder
   * is the only one who may, and nobody can take the key over before its lease ends, so a
   * sidecar that is unreachable (UNAVAILABLE: killed, restarting) or does not answer in time
   * (DEADLINE_EXCEEDED) is asked again, with the policy's backoff, for as long as the lease lasts
   * by this process's clock (counted from when the Begin or the last Extend was sent, so never
   * beyond the sidecar's). Each attempt is within the client's deadline and the lease's rest, and
   * none is made once the caller's {@link io.grpc.Context} is cancelled or past its deadline. Once
   * the lease has run out the last failure is thrown: the result is lost, and the next holder
   * sees {@link OnceContext#previousLeaseExpired()}. A policy that does not retry UNAVAILABLE
   * ({@link RetryPolicy#NONE}) tries once.
   */
  private void completeHeld(String key, OnceContext ctx, byte[] raw) {
    CompleteRequest r =
        CompleteRequest.newBuilder()
            .setNamespace(namespace)
            .setKey(key)
            .setLeaseToken(ctx.leaseToken())
            .setResult(ByteString.copyFrom(raw))
            .build();
    for (int n = 1; ; n++) {
      long left = ctx.leaseEnd() - System.nanoTime();
      Duration bound = Duration.ofNanos(Math.max(1, Math.min(deadline.toNanos(), left)));
      try {
        call(bound, d -> ip(d).complete(r));
        return;
      } catch (StepwellException e) {
        if (!isOutage(e) || !waitsOutOutages() || Context.current().isCancelled()) throw e;
        long pause = retry.backoff(n).toNanos();
        if (pause >= ctx.leaseEnd() - System.nanoTime()) throw e;
        try {
          TimeUnit.NANOSECONDS.sleep(pause);
        } catch (InterruptedException ie) {
          Thread.currentThread().interrupt();
          throw e;
        }
        shared.channel.resetConnectBackoff(); // dial at once, not at gRPC's reconnect backoff
      }
    }
  }

  // ---------------------------------------------------------------- conversions

  static byte[] encode(Object value) {
    try {
      return JSON.writeValueAsBytes(value);
    } catch (IOException e) {
      throw new IllegalArgumentException("result is not JSON-serializable: " + e.getMessage(), e);
    }
  }

  static <T> T decode(byte[] raw, JavaType type) {
    if (raw.length == 0) return null;
    try {
      return JSON.readValue(raw, type);
    } catch (IOException e) {
      throw new IllegalStateException("recorded result does not decode: " + e.getMessage(), e);
    }
  }

  /** byte[] is sent as is (UTF-8 JSON); anything else, String included, is JSON-serialized. */
  static byte[] stateBytes(Object state) {
    if (state instanceof byte[] bytes) return bytes;
    if (state instanceof ByteString bs) return bs.toByteArray();
    return encode(state);
  }

  public static Timestamp timestamp(Instant t) {
    return Timestamp.newBuilder().setSeconds(t.getEpochSecond()).setNanos(t.getNano()).build();
  }

  public static Instant instant(Timestamp t) {
    return Instant.ofEpochSecond(t.getSeconds(), t.getNanos());
  }

  static Duration javaDuration(com.google.protobuf.Duration d) {
    return Duration.ofSeconds(d.getSeconds(), d.getNanos());
  }

  public static com.google.protobuf.Duration duration(Duration d) {
    return com.google.protobuf.Duration.newBuilder()
        .setSeconds(d.getSeconds())
        .setNanos(d.getNano())
        .build();
  }

  private static long millisUntil(Timestamp t) {
    if (t.getSeconds() == 0 && t.getNanos() == 0) return 0;
    return Duration.between(Instant.now(), instant(t)).toMillis();
  }
}

"""The REST API: thin DRF views over ``runs``, ``decisions`` and ``selectors``.

Views validate the request's shape and call the function that owns the
change; they never write a model themselves.
"""

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import SAFE_METHODS, BasePermission, IsAuthenticated
from rest_framework.response import Response

from ..conf import API_EVENTS_PAGE
from ..conf import API_MAX_EVENTS_PAGE as MAX_EVENTS_PAGE
from ..hub import agents, claims, decisions, grants, outbox, policies, refused, replies, runs
from ..hub.refusals import Refusal
from ..models import Grant, Interrupt, Run, under
from ..reads import selectors, simulation
from ..rules import eligibility
from . import serializers as s


class StaffCanWrite(BasePermission):
    """Everyone logged in reads; only staff register or change agents and policies."""

    def has_permission(self, request, view):
        # Logged in, always: a view's own permission_classes replace the
        # default IsAuthenticated, and this class alone once let anonymous
        # callers list every agent.
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in SAFE_METHODS or request.user.is_staff


class AgentViewSet(viewsets.ModelViewSet):
    queryset = selectors.agents()
    serializer_class = s.AgentSerializer
    lookup_field = "name"
    permission_classes = [IsAuthenticated, StaffCanWrite]

    def get_serializer_class(self):
        # The secret is in the registration's answer and nowhere else it reads.
        return s.AgentCreatedSerializer if self.action == "create" else s.AgentSerializer

    def perform_destroy(self, instance):
        if instance.runs.exists():
            raise Refusal("AGENT_IN_USE", f"Agent {instance.name} has runs; its history must stay.", status=409)
        agents.delete(instance)

    @extend_schema(request=None, responses={200: s.SigningSecretSerializer})
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request, name=None):
        """A new signing secret for this agent (staff only), answered once; the old one stops signing at once."""
        agent = self.get_object()
        return Response(s.SigningSecretSerializer({"signing_secret": agents.rotate_signing_secret(agent)}).data)


class PolicyViewSet(viewsets.ModelViewSet):
    """Who may decide which interrupts: everyone logged in reads, staff write."""

    queryset = selectors.policies_listed()
    serializer_class = s.PolicySerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    permission_classes = [IsAuthenticated, StaffCanWrite]

    def perform_destroy(self, instance):
        policies.delete(instance)

    @extend_schema(request=s.SimulatePolicySerializer, responses={200: OpenApiTypes.OBJECT})
    @action(detail=False, methods=["post"])
    def simulate(self, request):
        """What this policy, or the named one as changed here, would have done to the last days' requests.

        Saves nothing. The body is a policy as created (or, with ``policy``, the fields to change),
        and ``days``. ``covered``: requests its "auto-approve when" rule would have approved, and
        ``refused`` those of them people rejected, dismissed or edited; ``second_approver``: requests
        approved by fewer people than it asks; ``asked``: approved without asking then, asked now.
        """
        body = s.SimulatePolicySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        existing = body.validated_data.get("policy")
        fields = {k: v for k, v in request.data.items() if k not in ("policy", "days")}
        proposal = s.PolicySerializer(existing, data=fields, partial=existing is not None,
                                      context=self.get_serializer_context())
        proposal.is_valid(raise_exception=True)
        return Response(simulation.policy(proposal.proposed(), body.validated_data["days"]).as_dict())


class GrantViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Standing grants, newest first: anyone logged in reads them; eligible reviewers make and revoke them."""

    queryset = Grant.objects.select_related("author", "agent", "revoked_by")
    serializer_class = s.GrantSerializer

    @extend_schema(request=s.NewGrantSerializer, responses={201: s.GrantSerializer})
    def create(self, request):
        """Approve the agent's next calls of the tool whose args fit, for some hours or uses.

        Refusals: 400 GRANT_* (bounds, scope), 403 NOT_ELIGIBLE or ALWAYS_ASK.
        """
        body = s.NewGrantSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        grant = grants.create(request.user, agent=data["agent"], tool_name=data["tool_name"],
                              args_schema=data.get("args_schema"), why=data["why"], hours=data["hours"],
                              max_uses=data.get("max_uses"), source=data.get("interrupt"))
        return Response(s.GrantSerializer(grant).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.SimulateGrantSerializer, responses={200: OpenApiTypes.OBJECT})
    @action(detail=False, methods=["post"])
    def simulate(self, request):
        """What a grant of this scope would have done to the agent's calls of the tool in the last days.

        Saves nothing. ``refused`` lists (newest first) the covered calls people rejected,
        dismissed or approved only with edits: what the grant would have let through.
        """
        if not request.user.has_perm(eligibility.DECIDE_PERMISSION):  # replaying scopes is work: reviewers only
            raise Refusal("NOT_ELIGIBLE", "Only reviewers (who may decide requests) can simulate a grant.",
                          status=403)
        body = s.SimulateGrantSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        schema = grants.check_scope(data.get("args_schema"))
        return Response(simulation.grant(data["agent"], data["tool_name"], schema, data["days"]).as_dict())

    @extend_schema(request=None, responses=s.GrantSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        """Stop the grant now: its next call asks a person. Refusals: 403 NOT_ELIGIBLE, 409 ALREADY_REVOKED."""
        grant = grants.revoke(self.get_object(), request.user)
        return Response(s.GrantSerializer(grant).data)


class ThreadViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    lookup_field = "thread_id"
    lookup_value_regex = "[^/]+"

    def get_queryset(self):
        return selectors.threads(agent=self.request.query_params.get("agent", ""))

    def get_serializer_class(self):
        return s.ThreadDetailSerializer if self.action == "retrieve" else s.ThreadSerializer

    @extend_schema(request=s.StartThreadSerializer, responses={201: s.RunSerializer})
    def create(self, request):
        """Start a new thread with its first run (optionally with a user message)."""
        body = s.StartThreadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = runs.start_run(
            body.validated_data["agent"], user=request.user, message=body.validated_data.get("message") or None,
            forwarded_props=body.validated_data.get("forwarded_props"), title=body.validated_data.get("title", ""),
        )
        return Response(s.RunSerializer(_reread(run)).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.StartRunSerializer, responses={201: s.RunSerializer})
    @action(detail=True, methods=["post"])
    def runs(self, request, thread_id=None):
        """Start a run on this thread; refused with PENDING_INTERRUPTS while decisions are open."""
        thread = self.get_object()
        body = s.StartRunSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = runs.start_run(
            thread.agent, user=request.user, thread_id=thread.thread_id,
            message=body.validated_data.get("message") or None,
            forwarded_props=body.validated_data.get("forwarded_props"),
        )
        return Response(s.RunSerializer(_reread(run)).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="Only events with a greater sequence number."),
            OpenApiParameter("limit", int, description=f"At most this many (default {API_EVENTS_PAGE}, "
                                                         f"max {MAX_EVENTS_PAGE})."),
        ],
        responses=s.EventPageSerializer,
    )
    @action(detail=True, methods=["get"])
    def events(self, request, thread_id=None):
        """The thread's event log in sequence order, paged by sequence number."""
        thread = self.get_object()
        try:
            after = int(request.query_params.get("after", 0))
            limit = min(int(request.query_params.get("limit", API_EVENTS_PAGE)), MAX_EVENTS_PAGE)
        except ValueError:
            raise ValidationError({"after": "after and limit are whole numbers."}) from None
        if limit < 1:
            raise ValidationError({"limit": "limit is at least 1."})
        events = selectors.event_rows(thread, after=after, limit=limit)
        return Response({
            "thread": thread.thread_id,
            "last_seq": thread.last_seq,
            "next_after": events[-1].seq if events else after,
            "events": s.EventSerializer(events, many=True).data,
        })


def _reread(run):
    """``run`` as every read of the API shows it (``selectors.runs``: with what resumed it)."""
    return selectors.runs().get(pk=run.pk)


class RunLookup:
    """The run named in the URL by its runId; ``?thread=`` picks one when several threads reuse it."""

    serializer_class = s.RunSerializer

    def get_object(self):
        runs_ = selectors.runs().filter(run_id=self.kwargs["run_id"])
        if thread := self.request.query_params.get("thread"):
            runs_ = runs_.filter(thread__thread_id=thread)
        found = list(runs_[:2])
        if not found:
            raise NotFound(f"No run {self.kwargs['run_id']!r}.")
        if len(found) > 1:
            raise Refusal("AMBIGUOUS_RUN_ID", f"Several threads have a run {self.kwargs['run_id']!r}: "
                          "add ?thread=<threadId>.", status=409)
        return found[0]


class RunDetail(RunLookup, generics.RetrieveAPIView):
    """One run by its runId; ``?thread=`` picks one when several threads reuse a runId."""


class RetryRun(RunLookup, generics.GenericAPIView):
    """Try a run waiting for its agent now instead of at its next backoff time."""

    @extend_schema(request=None, responses={202: s.RunSerializer})
    def post(self, request, run_id):
        run = self.get_object()
        if not outbox.retry_now(run, request.user):
            raise Refusal("NOT_WAITING", f"Run {run.run_id} is {run.status}, not waiting for its agent: "
                          "there is nothing to retry.", status=409)
        return Response(s.RunSerializer(_reread(run)).data, status=status.HTTP_202_ACCEPTED)


class CancelRun(RunLookup, generics.GenericAPIView):
    """Stop a streaming run, or one queued or waiting for its agent (staff only).

    Refusals: 403 ``STAFF_ONLY``, 409 ``NOT_RUNNING`` (it already ended), 404, 409 ``AMBIGUOUS_RUN_ID``.
    """

    @extend_schema(request=None, responses={202: s.RunSerializer})
    def post(self, request, run_id):
        run = self.get_object()
        if not runs.cancel(run, request.user):
            run.refresh_from_db()
            raise Refusal("NOT_RUNNING", f"Run {run.run_id} is {run.status}: it already ended, "
                          "there is nothing to stop.", status=409)
        return Response(s.RunSerializer(_reread(run)).data, status=status.HTTP_202_ACCEPTED)


class _SettleRun(RunLookup, generics.GenericAPIView):
    """Deal with an answer the agent refused (the run named is the failed resume).

    Refusals: 409 ``NOT_REFUSED`` (not a failed resume), 409 ``ALREADY_SETTLED``,
    403 ``NOT_ELIGIBLE`` / ``SELF_APPROVAL`` (neither staff nor eligible for
    every interrupt of the batch), 404, 409 ``AMBIGUOUS_RUN_ID``.
    """

    @extend_schema(request=None, responses={200: s.RunSerializer})
    def post(self, request, run_id):
        run = self.get_object()
        self.settle(run, request.user)
        return Response(s.RunSerializer(_reread(run)).data)


class ResendRun(_SettleRun):
    """Send the refused answers again, unchanged, as a new run (201: the new run).

    Also 409 ``RUN_IN_PROGRESS`` while the thread streams another run.
    """

    @extend_schema(request=None, responses={201: s.RunSerializer})
    def post(self, request, run_id):
        again = refused.resend(self.get_object(), request.user)
        return Response(s.RunSerializer(_reread(again)).data, status=status.HTTP_201_CREATED)


class ReopenRun(_SettleRun):
    """Return the refused batch's interrupts to pending (their answers kept, superseded, in the audit trail)."""

    settle = staticmethod(refused.reopen)


class CloseRun(_SettleRun):
    """Close the refused batch: its interrupts end cancelled, and the thread takes new input again."""

    settle = staticmethod(refused.close)


class InterruptViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    lookup_value_regex = r"\d+"

    @extend_schema(parameters=[
        OpenApiParameter("status", str, enum=Interrupt.Status.values),
        OpenApiParameter("agent", str), OpenApiParameter("reason", str), OpenApiParameter("thread", str),
        OpenApiParameter("scope", str, enum=["all", "mine"],
                         description="mine: only those waiting for the caller (they may decide them and have not)."),
    ])
    def list(self, request, *args, **kwargs):
        """Interrupts, oldest first; filter by status (default pending), agent, reason, thread, scope."""
        return super().list(request, *args, **kwargs)

    def get_serializer_context(self):
        # The serializer judges every interrupt by the request's policies, read once.
        return {**super().get_serializer_context(), "policies": selectors.policies_in_force(self.request)}

    def get_queryset(self):
        if self.action != "list":
            return selectors.interrupt_details()
        queryset = selectors.interrupts()
        params = self.request.query_params
        scope = params.get("scope", "all")
        if scope not in ("all", "mine"):
            raise ValidationError({"scope": "One of all, mine."})
        if scope == "mine":
            queryset = queryset.filter(eligibility.decidable_by(self.request.user,
                                                             selectors.policies_in_force(self.request)))
        wanted = params.get("status", Interrupt.Status.PENDING)
        if wanted != "all":
            if wanted not in Interrupt.Status.values:
                raise ValidationError({"status": f"One of {', '.join(Interrupt.Status.values)} or all."})
            queryset = queryset.filter(status=wanted)
        for param, lookup in (("agent", "run__agent__name"), ("reason", "reason"),
                              ("thread", "run__thread__thread_id")):
            if value := params.get(param):
                queryset = queryset.filter(**{lookup: value})
        return queryset

    def get_serializer_class(self):
        return s.InterruptDetailSerializer if self.action in ("retrieve", "decide") else s.InterruptSerializer

    @extend_schema(request=s.BulkDecideSerializer, responses={200: s.BulkResultSerializer})
    @action(detail=False, methods=["post"], url_path="bulk-decide")
    def bulk_decide(self, request):
        """Approve, reject or cancel many interrupts at once: by ``ids``, or all pending matching ``filter``.

        Each is decided as if alone (its policy and state checked afresh);
        those already decided or not the caller's to decide are skipped and
        reported with their refusal's code. At most MAX_BULK_DECISIONS per
        request: ``more`` says how many matching the filter were left.
        """
        body = s.BulkDecideSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        targets = selectors.bulk_targets(
            ids=data.get("ids"), filters=selectors.InboxFilters.from_query(data.get("filter", {})),
            user=request.user, in_force=selectors.policies_in_force(request))
        chosen, missing, more = targets.chosen, targets.missing, targets.more
        done = decisions.decide_many(chosen, request.user, data["action"], data.get("comment", ""),
                                     claim_confirmed=data["confirm_claim"], unsent=replies.deferrable(request))
        replies.acknowledge_after(request, done.decided)
        skipped = [{"id": interrupt.pk, "interrupt_id": interrupt.interrupt_id, "code": problem.code,
                    "detail": problem.message} for interrupt, problem in done.skipped]
        skipped += [{"id": pk, "interrupt_id": None, "code": "NOT_FOUND", "detail": f"No interrupt {pk}."}
                    for pk in missing]
        summary = done.summary + (f"; {len(missing)} not found" if missing else "")
        return Response(s.BulkResultSerializer({"action": done.action, "decided": done.decided, "skipped": skipped,
                                                "summary": summary, "more": more}).data)

    @extend_schema(request=s.DecideSerializer, responses={201: s.DecisionSerializer})
    @action(detail=True, methods=["post"])
    def decide(self, request, pk=None):
        """Answer the interrupt: approve, reject, edit (approve with edited args), respond, or cancel (dismiss).

        The author may send another answer to change it until the batch is
        sent; anyone else gets 409 ALREADY_DECIDED naming who decided.
        """
        interrupt = get_object_or_404(
            Interrupt.objects.select_related("run").defer(*under("run", Run.CONVERSATION)), pk=pk)
        body = s.DecideSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        answer = decisions.answer_for(
            interrupt, data["action"], payload=data.get("payload"), edited_args=data.get("edited_args")
        )
        decision = decisions.decide(
            interrupt, request.user, answer.status, answer.payload, metadata=data.get("metadata"),
            comment=data.get("comment", ""), seen=data.get("seen"), fresh=True, claim_confirmed=data["confirm_claim"],
            unsent=replies.deferrable(request), action=answer.action,
        )
        # It travels once this answer has left: a process dying first never told anyone it was taken.
        replies.acknowledge_after(request, [decision])
        return Response(s.DecisionSerializer(decision).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: s.InterruptDetailSerializer})
    @action(detail=True, methods=["post"])
    def undo(self, request, pk=None):
        """Take back your own decision while its batch is unsent: the interrupt waits again (200: it, pending).

        A decision that completes its batch holds the resume for
        COUNTERSIGN_UNDO_SECONDS; undone within it, the resume is withdrawn and
        nothing reaches the agent. Refusals: 409 NOT_DECIDED (no decision
        stands on it), 403 NOT_YOURS (someone else's does), 409 ALREADY_SENT
        (the agent has it), 409 EXPIRED.
        """
        decisions.undo(get_object_or_404(Interrupt, pk=pk), request.user)
        interrupt = selectors.interrupt_details().get(pk=pk)
        return Response(s.InterruptDetailSerializer(interrupt, context=self.get_serializer_context()).data)

    @extend_schema(request=s.ClaimSerializer, responses={200: s.ClaimResultSerializer})
    @action(detail=True, methods=["post"])
    def claim(self, request, pk=None):
        """Say you are reviewing it: others see who, live; it lapses after COUNTERSIGN_CLAIM_IDLE_SECONDS idle.

        Only someone who may decide it may claim it. Claiming it again renews
        the claim; a colleague's claim is 409 CLAIMED unless ``take_over``.
        """
        interrupt = get_object_or_404(Interrupt, pk=pk)
        body = s.ClaimSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        found = claims.claim(interrupt, request.user, take_over=body.validated_data["take_over"])
        return Response(s.ClaimResultSerializer(found).data)

    @extend_schema(request=None, responses={204: None})
    @action(detail=True, methods=["post"])
    def release(self, request, pk=None):
        """Give up your claim (staff may release anyone's); 409 NOT_CLAIMED when nobody holds one."""
        claims.release(get_object_or_404(Interrupt, pk=pk), request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
